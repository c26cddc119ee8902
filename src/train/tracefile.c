// train/tracefile — --trace: the timeline of the traced steps, every rank's
// events (core/trace) gathered to world rank 0 over the ranks' own
// communicator (ranks on other hosts share no files), written as one
// Chrome trace-event file that Perfetto and chrome://tracing load:
//
//   {"traceEvents": [rank 0's events, rank 1's, ...],
//    "displayTimeUnit": "ms", "otherData": {...}}
//
// pid is the world rank, tid the stream (core/trace), ts and dur are
// microseconds from an origin the ranks agree on at start.
#include "train/trainer_impl.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/fileio.h"
#include "core/timer.h"

int trainer_trace_open(Trainer *t, Err *err) {
    const TrainConfig *tc = t->tc;
    int start = t->done, a = tc->trace_first, b = tc->trace_last;
    if (!a) {   // the second and third steps of the run (its first one when it does one): past the first's warm-up
        a = start + 2;
        b = start + 3 < tc->steps ? start + 3 : tc->steps;
        if (a > b) a = b;
    } else if (b <= start) {
        return err_set(err, ERR_USAGE, "--trace-steps %d:%d: the run continues from step %d; trace steps after it", a, b,
                       start);
    } else if (a <= start) {   // a resumed run (a restart too) traces what is left of them
        a = start + 1;
    }
    // one origin for every rank: on one host (one CLOCK_MONOTONIC) rank 0's
    // reading after a barrier; across hosts each rank's own reading at the
    // barrier's end (aligned as well as the barrier releases them together)
    double origin = timer_now();
    if (t->stats) {
        double mine;
        if (comm_barrier(t->stats, err)) return -1;
        origin = mine = timer_now();
        if (comm_broadcast(t->stats, &origin, 1, DT_F64, 0, err)) return -1;
        if (t->hosts[0]) origin = mine;
    }
    if (!(t->trace = trace_create(a, b, (size_t)tc->trace_cap, origin, err))) return -1;
    t->trace_first = a;
    t->trace_last = b;
    trace_attach(t->trace);
    return 0;
}

static int write_all(int fd, const char *s, size_t n) {
    while (n > 0) {
        ssize_t w = write(fd, s, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        s += w;
        n -= (size_t)w;
    }
    return 0;
}

// This rank's events as a JSON array.
static void rank_events(Trainer *t, JsonBuf *b) {
    const Layout *l = t->lay;
    char name[96];
    snprintf(name, sizeof name, "rank %d (dp %d tp %d pp %d)", l->rank, l->dp_rank, l->tp_rank, l->pp_rank);
    jb_init(b);
    jb_arr_begin(b);
    trace_json(t->trace, l->rank, name, b);
    jb_arr_end(b);
}

// The file's end: what was traced, and a note when events were dropped.
static void footer(Trainer *t, int ranks, int64_t events, int64_t dropped, int worst, JsonBuf *b) {
    char steps[32], note[200];
    snprintf(steps, sizeof steps, "%d:%d", t->trace_first, t->trace_last);
    jb_init(b);
    jb_obj_begin(b);
    jb_key(b, "source"); jb_str(b, "tessera train --trace");
    jb_key(b, "steps"); jb_str(b, steps);
    jb_key(b, "ranks"); jb_int(b, ranks);
    jb_key(b, "events"); jb_int(b, events);
    jb_key(b, "dropped_events"); jb_int(b, dropped);
    if (dropped) {
        snprintf(note, sizeof note, "ranks held at most %zu events each: %lld later ones were left out (rank %d first); "
                 "trace fewer steps", trace_cap(t->trace), (long long)dropped, worst);
        jb_key(b, "note"); jb_str(b, note);
    }
    jb_obj_end(b);
}

// The file, on world rank 0 (fd -1 elsewhere): a temporary beside it,
// renamed over it once whole.
typedef struct {
    int fd, bad;               // bad: a write failed (errno in e)
    int e;
    char tmp[4200];
} Out;

static void out_put(Out *o, const char *s, size_t n) {
    if (o->fd < 0 || o->bad) return;
    o->bad = write_all(o->fd, s, n);
    o->e = errno;
}

// Rank r's array's elements, without its brackets (every rank has some: its names).
static void out_rank(Out *o, int r, const char *s, size_t n) {
    if (r) out_put(o, ",\n", 2);
    if (n > 2) out_put(o, s + 1, n - 2);
}

// World rank 0: the end of the file and its rename, and the lines saying so.
static int out_close(Trainer *t, Out *o, const int64_t *len, const int64_t *drop, int R, Err *err) {
    const char *path = t->tc->trace_path;
    int64_t events = 0, dropped = 0;
    int worst = -1;
    for (int r = 0; r < R; r++) {
        events += len[2 * r + 1];
        dropped += drop[r];
        if (drop[r] && worst < 0) worst = r;
    }
    JsonBuf f;
    footer(t, R, events, dropped, worst, &f);
    out_put(o, "\n],\n\"displayTimeUnit\": \"ms\",\n\"otherData\": ", 42);
    out_put(o, f.s, f.len);
    out_put(o, "}\n", 2);
    jb_free(&f);
    if (o->bad) {
        close(o->fd);
        unlink(o->tmp);
        return err_set(err, ERR_RUN, "--trace %s: write failed: %s", path, strerror(o->e));
    }
    if (file_temp_commit(o->fd, o->tmp, path, err)) return -1;
    printf("trace:     %s: %lld events of %d rank%s, steps %d:%d (open it in ui.perfetto.dev or chrome://tracing)\n", path,
           (long long)events, R, R == 1 ? "" : "s", t->trace_first, t->trace_last);
    if (dropped)
        printf("trace:     %lld events past the cap of %zu per rank were left out (rank %d first): trace fewer steps\n",
               (long long)dropped, trace_cap(t->trace), worst);
    return 0;
}

// Every rank's text to world rank 0, which writes it as it comes. The
// ranks' communicator has no gather, and sends to rank 0 alone would put
// its operation count out of step with the others': each rank broadcasts
// its text in turn (the others drop it). len[2r]: rank r's text length.
static int pass_on(Trainer *t, Out *o, const JsonBuf *own, const int64_t *len, int R, Err *err) {
    int me = comm_rank(t->stats);
    for (int r = 1; r < R; r++) {
        char *s = me == r ? own->s : malloc((size_t)len[2 * r] + 1);
        if (!s) return err_set(err, ERR_RUN, "out of memory gathering --trace's events");
        int rc = comm_broadcast(t->stats, s, (size_t)len[2 * r], DT_U8, r, err);
        if (!rc && me == 0) out_rank(o, r, s, (size_t)len[2 * r]);
        if (me != r) free(s);
        if (rc) return -1;
    }
    return 0;
}

int trainer_trace_write(Trainer *t, Err *err) {
    trace_attach(NULL);
    JsonBuf own;
    rank_events(t, &own);
    int R = t->stats ? comm_size(t->stats) : 1, me = t->stats ? comm_rank(t->stats) : 0, rc = 0;
    // per rank: its text's length and events, and the events it dropped
    int64_t mine[3] = {(int64_t)own.len, (int64_t)trace_count(t->trace), (int64_t)trace_dropped(t->trace)};
    int64_t *len = calloc((size_t)R * 2, sizeof *len), *drop = calloc((size_t)R, sizeof *drop);
    if (!len || !drop) rc = err_set(err, ERR_RUN, "out of memory");
    else if (t->stats)
        rc = comm_allgather(t->stats, mine, len, 2, DT_I64, err) || comm_allgather(t->stats, mine + 2, drop, 1, DT_I64, err);
    else
        len[0] = mine[0], len[1] = mine[1], drop[0] = mine[2];
    // rank 0 passes the others' text on even when its file cannot be made
    Out o = {.fd = -1};
    Err ferr = {0};
    if (!rc && me == 0 && (o.fd = file_temp_create(t->tc->trace_path, o.tmp, sizeof o.tmp, &ferr)) >= 0) {
        out_put(&o, "{\"traceEvents\": [\n", 18);
        out_rank(&o, 0, own.s, own.len);
    }
    if (!rc && t->stats) rc = pass_on(t, &o, &own, len, R, err);
    if (!rc && me == 0 && o.fd < 0) rc = (*err = ferr, -1);
    else if (!rc && me == 0) rc = out_close(t, &o, len, drop, R, err);
    else if (rc && o.fd >= 0) { close(o.fd); unlink(o.tmp); }
    free(len);
    free(drop);
    jb_free(&own);
    return trainer_agree(t, rc, "to write --trace's file", err);
}
