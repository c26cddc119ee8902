#include "train/spike.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int spike_init(SpikeGuard *g, double z, int window, int rollback, Err *err) {
    memset(g, 0, sizeof *g);
    if (z <= 0) return 0;
    g->z = z;
    g->window = window > 0 ? window : SPIKE_WINDOW;
    g->rollback = rollback;
    g->loss = calloc((size_t)g->window, sizeof *g->loss);
    g->norm = calloc((size_t)g->window, sizeof *g->norm);
    if (!g->loss || !g->norm) {
        spike_free(g);
        return err_set(err, ERR_RUN, "out of memory for the spike guard's window");
    }
    return 0;
}

void spike_free(SpikeGuard *g) {
    free(g->loss);
    free(g->norm);
    memset(g, 0, sizeof *g);
}

// The i-th oldest value of a ring.
static double at(const SpikeGuard *g, const double *ring, int i) {
    return ring[(g->head - g->n + i + g->window) % g->window];
}

// x stands more than z standard deviations above the ring's mean (summed
// oldest first: the same bits on every rank and after a resume).
static int above(const SpikeGuard *g, const double *ring, double x) {
    double mean = 0, var = 0;
    for (int i = 0; i < g->n; i++) mean += at(g, ring, i);
    mean /= g->n;
    for (int i = 0; i < g->n; i++) var += (at(g, ring, i) - mean) * (at(g, ring, i) - mean);
    double sd = sqrt(var / g->n);
    return sd > 0 && x > mean + g->z * sd;
}

static void push(SpikeGuard *g, double loss, double norm) {
    g->loss[g->head] = loss;
    g->norm[g->head] = norm;
    g->head = (g->head + 1) % g->window;
    if (g->n < g->window) g->n++;
}

int spike_check(SpikeGuard *g, double loss, double norm) {
    if (g->z <= 0) return 0;
    if (g->n >= SPIKE_MIN && (above(g, g->loss, loss) || above(g, g->norm, norm))) {
        g->run++;
        return 1;
    }
    g->run = 0;
    push(g, loss, norm);
    return 0;
}

char *spike_state_json(const SpikeGuard *g) {
    JsonBuf b;
    jb_init(&b);
    jb_obj_begin(&b);
    const double *ring[2] = {g->loss, g->norm};
    const char *name[2] = {"loss", "norm"};
    for (int r = 0; r < 2; r++) {
        jb_key(&b, name[r]);
        jb_arr_begin(&b);
        for (int i = 0; i < g->n; i++) jb_num(&b, at(g, ring[r], i));
        jb_arr_end(&b);
    }
    jb_key(&b, "run"); jb_int(&b, g->run);
    jb_obj_end(&b);
    return b.s;
}

int spike_state_read(SpikeGuard *g, const Json *j, const char *where, Err *err) {
    const Json *l = json_get(j, "loss"), *nm = json_get(j, "norm"), *run = json_get(j, "run");
    int64_t r;
    if (!l || !nm || l->type != JSON_ARR || nm->type != JSON_ARR || l->len != nm->len || json_int64(run, &r) || r < 0)
        return err_set(err, ERR_USAGE, "%s: field 'train.spike' is not a spike guard's window", where);
    g->n = g->head = 0;
    size_t skip = l->len > (size_t)g->window ? l->len - (size_t)g->window : 0, i = 0;
    for (const Json *a = l->child, *b = nm->child; a && b; a = a->next, b = b->next, i++) {
        if (a->type != JSON_NUM || b->type != JSON_NUM)
            return err_set(err, ERR_USAGE, "%s: field 'train.spike' holds a value that is not a number", where);
        if (i >= skip) push(g, a->num, b->num);
    }
    g->run = (int)r;
    return 0;
}
