// tessera plot: runs' metrics JSONL as one SVG of line charts (train/plot).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/cli.h"
#include "cli/flags.h"
#include "train/plot.h"

// --out must not be one of the inputs: the same file by device and inode,
// however it is spelled (another path, a hard link, a symlink to it), or the
// SVG would replace a run's log. 0, or -1 with e naming both.
static int out_not_input(const char *out, char **inputs, int n, Err *e) {
    struct stat so, si;
    if (stat(out, &so)) return 0;   // not there yet (or unreadable): nothing of the inputs' to replace
    for (int i = 0; i < n; i++)
        if (!stat(inputs[i], &si) && si.st_dev == so.st_dev && si.st_ino == so.st_ino)
            return err_set(e, ERR_USAGE, "--out %s is the input %s (the same file): give the SVG another name", out,
                           inputs[i]);
    return 0;
}

int cmd_plot(int argc, char **argv) {
    // the JSONL files come first, the flags after them
    int nfiles = 0;
    while (nfiles < argc && strncmp(argv[nfiles], "--", 2) != 0) nfiles++;
    const char *out = NULL, *metrics = NULL;
    int log_loss = 0, smooth = 0, width = 900;
    Flag f[] = {
        {"out", FLAG_STR, &out, 0, 0, "FILE.svg", "the SVG to write (required)", 0, NULL},
        {"metrics", FLAG_STR, &metrics, 0, 0, "LIST", "panels, comma-separated (default loss,val_loss,lr,tokens_per_s,mem)", 0, NULL},
        {"log-loss", FLAG_BOOL, &log_loss, 0, 0, "", "loss and val_loss on a log scale", 0, NULL},
        {"smooth", FLAG_INT, &smooth, 0, 100000, "N", "draw each line as the trailing mean of N points, the raw line faint behind it", 0, NULL},
        {"width", FLAG_INT, &width, 200, 10000, "PX", "the figure's width in pixels (default 900)", 0, NULL},
    };
    int nf = (int)(sizeof f / sizeof f[0]), help;
    Err e = {0};
    Json *cfg = NULL;   // plot has no --config: never set
    if (flags_parse(f, nf, argc - nfiles, argv + nfiles, "plot", &help, &cfg, &e)) return cli_fail("plot", &e);
    if (help) {
        printf("usage: tessera plot RUN.jsonl [RUN2.jsonl ...] --out FILE.svg [flags]\n\n"
               "Draws the metrics `tessera train --log` writes as one SVG: a panel per metric, the runs overlaid\n"
               "with a legend, axes with ticks and units. Metrics: %s.\n"
               "A resumed run's file holds steps again from its checkpoint on: the later record of a step wins.\n"
               "Values a panel cannot draw (not finite, beyond ±1e300, not above 0 on a log scale) are left out;\n"
               "the panel and stderr say how many. --out may not be one of the inputs (by any name or link).\n\n",
               plot_metric_names());
        flags_print(f, nf);
        return 0;
    }
    if (nfiles == 0) {
        err_set(&e, ERR_USAGE, "give one or more metrics files: tessera plot RUN.jsonl [RUN2.jsonl ...] --out FILE.svg");
        return cli_fail("plot", &e);
    }
    if (!out) {
        err_set(&e, ERR_USAGE, "--out FILE.svg is required");
        return cli_fail("plot", &e);
    }
    if (metrics && plot_check_metrics(metrics, &e)) return cli_fail("plot", &e);
    if (out_not_input(out, argv, nfiles, &e)) return cli_fail("plot", &e);
    PlotRun **runs = calloc((size_t)nfiles, sizeof *runs);
    const char **names = calloc((size_t)nfiles, sizeof *names);
    int rc = runs && names ? 0 : cli_fail("plot", (err_set(&e, ERR_RUN, "out of memory"), &e));
    for (int i = 0; !rc && i < nfiles; i++) {
        if (plot_run_load(&runs[i], argv[i], &e)) rc = cli_fail("plot", &e);
        const char *slash = strrchr(argv[i], '/');
        names[i] = slash ? slash + 1 : argv[i];   // the legend names the files
    }
    PlotOptions o = {.metrics = metrics, .log_loss = log_loss, .smooth = smooth, .width = width};
    long skipped = 0;
    if (!rc && plot_svg(out, runs, names, nfiles, &o, &skipped, &e)) rc = cli_fail("plot", &e);
    if (!rc) printf("plot: %s (%d run%s)\n", out, nfiles, nfiles == 1 ? "" : "s");
    if (!rc && skipped)
        fprintf(stderr, "plot: %ld value%s not drawn (not finite, beyond ±1e300, or not above 0 on a log scale): "
                "each panel says how many of its own\n", skipped, skipped == 1 ? "" : "s");
    for (int i = 0; runs && i < nfiles; i++) plot_run_free(runs[i]);
    free(runs);
    free(names);
    return rc;
}
