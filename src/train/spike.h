// train/spike — the loss-spike guard (train --spike-guard Z), as PaLM and
// OPT ran theirs by hand: a step whose loss or gradient norm stands more
// than Z standard deviations above the mean of the last --spike-window
// accepted steps is skipped on every rank (no update, moments untouched,
// as an fp16 overflow is), once the window holds SPIKE_MIN steps; after
// --spike-rollback K spikes in a row the run goes back to its last
// checkpoint and on past the batches that caused them.
//
// Every rank decides alike: the loss and the norm are the global ones. The
// window is part of a checkpoint (spike_state_json), so a resumed run
// decides as the uninterrupted one would, and a rollback takes the
// checkpoint's window back with its parameters.
#ifndef TSR_TRAIN_SPIKE_H
#define TSR_TRAIN_SPIKE_H

#include "core/check.h"
#include "core/json.h"

enum { SPIKE_MIN = 10, SPIKE_WINDOW = 100 };

typedef struct SpikeGuard {
    double z;              // standard deviations; 0: off
    int window;            // accepted steps the statistics cover
    int rollback;          // spikes in a row that send the run back to its checkpoint; 0: never
    double *loss, *norm;   // the last `window` accepted steps', a ring
    int n, head;           // steps held, the next slot
    int run;               // spikes in a row so far
} SpikeGuard;

// z 0 turns the guard off (nothing allocated). 0, or -1 out of memory.
int spike_init(SpikeGuard *g, double z, int window, int rollback, Err *err);
void spike_free(SpikeGuard *g);
// Whether the step of global (loss, norm) is a spike: 1 (the run of them
// grows), or 0 (the run ends and the step enters the window). Always 0
// when the guard is off.
int spike_check(SpikeGuard *g, double loss, double norm);
// The window as a JSON object {"loss": [...], "norm": [...], "run": k},
// oldest first; malloc'd.
char *spike_state_json(const SpikeGuard *g);
// Takes the window of a checkpoint's spike_state_json (j; where names it
// in errors). A window of another --spike-window keeps its newest steps.
int spike_state_read(SpikeGuard *g, const Json *j, const char *where, Err *err);

#endif
