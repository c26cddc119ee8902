// train/plot — runs' metrics (the JSONL `tessera train --log` writes) as
// one SVG of line charts: a panel per metric, the runs overlaid in distinct
// colours with a legend, axes with ticks at round numbers and units; loss
// panels optionally on a log scale, every line optionally smoothed. Plain
// text output, no dependency.
#ifndef TSR_TRAIN_PLOT_H
#define TSR_TRAIN_PLOT_H

#include <stddef.h>

#include "core/check.h"

typedef struct PlotRun PlotRun;

// Reads a metrics JSONL file: step records (loss, lr, tokens_per_s, ...)
// and evaluation records (val_loss). A resumed run's file holds steps
// again from its checkpoint on: the later record of a step wins. Fails
// naming the file (and line) when it cannot be read or a line is not a
// JSON object, or when it holds no step or evaluation record.
int plot_run_load(PlotRun **out, const char *path, Err *err);
void plot_run_free(PlotRun *r);

typedef struct PlotOptions {
    const char *metrics;   // comma-separated (plot_metric_names), NULL: "loss,val_loss,lr,tokens_per_s,mem"
    int log_loss;          // loss and val_loss panels on a log scale
    int smooth;            // > 1: each line is the trailing mean of this many points (the raw one drawn faint)
    int width;             // pixels (0: 900)
} PlotOptions;

// The metrics a panel can show, for help and errors.
const char *plot_metric_names(void);
// Whether a metric list is valid: 0, or -1 with err naming the unknown one.
int plot_check_metrics(const char *metrics, Err *err);

// Writes the SVG of runs[0..n) (legend names: names[i], any bytes: what XML
// cannot hold shows as U+FFFD) to path (a temporary renamed over it).
// Values a panel's axis cannot draw (not finite, beyond ±1e300, not above 0
// on a log scale, or at such a step) are left out, and the panel says how
// many; *skipped: their count over the panels. 0, or -1 with err.
int plot_svg(const char *path, PlotRun *const *runs, const char *const *names, int n, const PlotOptions *o,
             long *skipped, Err *err);

#endif
