// train/valset — validation data of one path or of a mixture's sources.
#include <stdio.h>
#include <string.h>

#include "train/trainer.h"

int valset_open(ValSet *v, const Mixture *m, const char *flag, const Tokenizer *tok, const LoaderOptions *o, Err *err) {
    memset(v, 0, sizeof *v);
    if (!m->plain && mix_check_tokenizer(m, tok->name, err)) { err_prefix(err, flag); return -1; }
    v->plain = m->plain;
    for (int s = 0; s < m->n; s++) {
        snprintf(v->name[s], sizeof v->name[s], "%s", m->src[s].name);
        v->weight[s] = m->src[s].weight;
        if (loader_open(&v->ld[s], m->src[s].path, tok, o, err)) {
            if (!m->plain) err_prefix(err, m->src[s].name);
            err_prefix(err, flag);
            valset_close(v);
            return -1;
        }
        v->n = s + 1;
    }
    return 0;
}

void valset_close(ValSet *v) {
    for (int s = 0; s < v->n; s++) loader_free(v->ld[s]);
    memset(v, 0, sizeof *v);
}

int valset_evaluate(ValSet *v, Stage *st, Pipe *p, int64_t max_rounds, double *sum, int64_t *ntok, Err *err) {
    for (int s = 0; s < v->n; s++)
        if (train_evaluate(st, p, v->ld[s], max_rounds, &sum[s], &ntok[s], err)) return -1;
    return 0;
}

double valset_loss(const ValSet *v, const double *sum, const int64_t *ntok, double *loss) {
    double all = 0;
    for (int s = 0; s < v->n; s++) {
        loss[s] = ntok[s] > 0 ? sum[s] / (double)ntok[s] : 0.0;
        all += v->weight[s] * loss[s];
    }
    return all;
}
