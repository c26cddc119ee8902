#include "train/schedule.h"

#include <math.h>

float lr_at(const LrSchedule *o, int step) {
    float lr = (float)o->lr, min_lr = (float)o->min_lr;
    if (step < o->warmup) return lr * (float)(step + 1) / (float)o->warmup;
    if (o->shape == LR_CONSTANT) return lr;
    int span = o->steps - o->warmup;
    if (span <= 0) return lr;
    double progress = (double)(step - o->warmup) / span;
    if (progress > 1.0) progress = 1.0;
    return (float)(min_lr + 0.5 * (lr - min_lr) * (1.0 + cos(M_PI * progress)));
}
