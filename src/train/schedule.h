// train/schedule — the learning-rate schedule: linear warmup, then cosine
// decay to a floor (or a constant rate).
#ifndef TSR_TRAIN_SCHEDULE_H
#define TSR_TRAIN_SCHEDULE_H

typedef enum { LR_COSINE, LR_CONSTANT } LrShape;

typedef struct LrSchedule {
    double lr, min_lr;         // peak and floor learning rate (as given; used as float)
    int warmup;                // linear warmup steps
    int steps;                 // total optimizer steps (cosine horizon)
    LrShape shape;
} LrSchedule;

// Learning rate of optimizer step `step` (0-based): linear warmup from
// lr/warmup to lr over the first `warmup` steps, then cosine from lr down to
// min_lr at step `steps` (or constant lr).
float lr_at(const LrSchedule *o, int step);

#endif
