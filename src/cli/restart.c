// cli/restart — tessera train's launcher loop: the ranks run, and with
// --max-restarts a run whose ranks failed starts again from the run
// directory's latest checkpoint (it outlives the forked ranks).
#include <errno.h>
#include <stdio.h>
#include <time.h>

#include "cli/cli.h"
#include "core/json.h"

// The step of --ckpt-dir's latest checkpoint (its `latest` file names
// step_NNNNNNNN), or -1 when it has none yet.
static int latest_step(const char *dir) {
    char path[4200], line[64] = "";
    snprintf(path, sizeof path, "%s/latest", dir);
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    int step = -1;
    if (fgets(line, sizeof line, f) && sscanf(line, "step_%d", &step) != 1) step = -1;
    fclose(f);
    return step;
}

// A restart in the run's JSONL (the launcher writes it between attempts,
// when no rank is running).
static void log_restart(const char *log, int k, int max, const char *why, int step) {
    FILE *f = log ? fopen(log, "a") : NULL;
    if (!f) return;
    JsonBuf b;
    jb_init(&b);
    jb_obj_begin(&b);
    jb_key(&b, "restart"); jb_int(&b, k);
    jb_key(&b, "max_restarts"); jb_int(&b, max);
    jb_key(&b, "reason"); jb_str(&b, why);
    jb_key(&b, "resume_step"); jb_int(&b, step > 0 ? step : 0);
    jb_obj_end(&b);
    fprintf(f, "%s\n", b.s);
    jb_free(&b);
    fclose(f);
}

// train_launch (cli.h): runs the ranks; with --max-restarts, a run whose ranks failed (a rank
// killed, or ending with exit 1) starts again, every rank, from the run
// directory's latest checkpoint after `delay` seconds, up to max times
// (torchrun's elastic restarts, for ranks forked here). 0, or the exit
// status, the failure reported.
int train_launch(TrainConfig *tc, int world, CommRankMain rank_main, void *arg, double timeout, int max, double delay) {
    const char *resume0 = tc->resume, *init0 = tc->init_from;
    for (int k = 0;; k++) {
        Err le = {0};
        if (!comm_run(world > 0 ? world : 1, rank_main, arg, timeout, &le)) return 0;
        if (!le.shown) fprintf(stderr, "tessera train: %s\n", le.msg);
        int rc = le.code ? le.code : 1;
        if (rc == ERR_USAGE || k == max) {
            if (max > 0 && rc != ERR_USAGE)
                fprintf(stderr, "tessera train: the ranks failed again after %d restart%s (--max-restarts %d): stopping\n",
                        k, k == 1 ? "" : "s", max);
            return rc;
        }
        int step = latest_step(tc->ckpt_dir);
        // the latest checkpoint if there is one; otherwise the run starts as it first did
        tc->resume = step >= 0 ? tc->ckpt_dir : resume0;
        tc->init_from = step >= 0 ? NULL : init0;
        printf("restart:   %d of %d after the failure above: every rank starts again in %g s from %s\n", k + 1, max,
               delay, step >= 0 ? "the latest checkpoint" : "the beginning (no checkpoint yet)");
        if (step >= 0) printf("           (%s/step_%08d)\n", tc->ckpt_dir, step);
        fflush(stdout);
        log_restart(tc->log_path, k + 1, max, le.msg, step);
        struct timespec ts = {(time_t)delay, (long)((delay - (double)(time_t)delay) * 1e9)};
        while (nanosleep(&ts, &ts) && errno == EINTR) {}
    }
}
