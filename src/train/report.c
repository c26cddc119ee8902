#include "train/report.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/json.h"

struct Report {
    FILE *log;
    int progress;
    int mfu_warned;   // an MFU above 100% was explained once
};

int report_open(Report **out, const char *log_path, int progress, Err *err) {
    *out = NULL;
    Report *r = calloc(1, sizeof *r);
    if (!r) return err_set(err, ERR_RUN, "out of memory");
    r->progress = progress;
    if (log_path && !(r->log = fopen(log_path, "a"))) {
        free(r);
        return err_set(err, ERR_USAGE, "--log %s: %s", log_path, strerror(errno));
    }
    *out = r;
    return 0;
}

void report_close(Report *r) {
    if (!r) return;
    if (r->log) fclose(r->log);
    free(r);
}

// Clears the progress bar's line before a line of text.
static void clear_bar(const Report *r) {
    if (r->progress) printf("\r\033[K");
}

static void write_record(Report *r, JsonBuf *b) {
    fputs(b->s, r->log);
    fputc('\n', r->log);
    fflush(r->log);
}

// "name": {params, params16, grads, optim, acts, comm, workspace} of peak or
// current bytes, and "offload", the bytes on disk, when there are any.
static void mem_object(JsonBuf *b, const char *name, size_t (*bytes)(MemTag tag)) {
    static const MemTag tags[] = {MEM_PARAMS, MEM_PARAMS16, MEM_GRADS, MEM_OPTIM, MEM_ACTS, MEM_COMM, MEM_WORKSPACE};
    jb_key(b, name);
    jb_obj_begin(b);
    for (size_t i = 0; i < sizeof tags / sizeof *tags; i++) {
        jb_key(b, mem_tag_name(tags[i]));
        jb_int(b, (int64_t)bytes(tags[i]));
    }
    if (mem_offload()) {   // bytes on disk in place of memory (the optimizer offload's files)
        jb_key(b, "offload");
        jb_int(b, (int64_t)mem_offload());
    }
    jb_obj_end(b);
}

// "name": {source: value, ...}; decimals 0: integers.
static void source_object(JsonBuf *b, const char *name, const SourceFigures *f, int decimals) {
    jb_key(b, name);
    jb_obj_begin(b);
    for (int i = 0; i < f->n; i++) {
        jb_key(b, f->name[i]);
        if (decimals) jb_fixed(b, f->v[i], decimals);
        else jb_int(b, (int64_t)f->v[i]);
    }
    jb_obj_end(b);
}

void report_step(Report *r, const StepMetrics *m) {
    clear_bar(r);
    printf("step %5d/%d | loss %.4f | lr %.2e | norm %6.3f | %7.1f ms | %8.0f tok/s | MFU %5.1f%%", m->step, m->steps,
           m->loss, m->lr, m->grad_norm, m->ms, m->tokens_per_s, 100 * m->mfu);
    if (m->scaler) printf(" | scale %g%s", m->loss_scale, m->skipped && !m->spike ? " | skipped: gradients overflowed" : "");
    if (m->offload) printf(" | I/O wait %.1f ms", m->io_wait_ms);
    if (m->spike) printf(" | skipped: a spike (--spike-guard)");
    for (int i = 0; i < m->tokens.n; i++) printf("%s%s %.0f", i ? ", " : " | tokens ", m->tokens.name[i], m->tokens.v[i]);
    printf("\n");
    if (m->mfu > 1 && !r->mfu_warned) {
        r->mfu_warned = 1;
        printf("warning:   MFU above 100%%: the --peak-gflops it is quoted against is below what this run achieves "
               "(without the flag MFU is quoted against the measured peak of the run's arithmetic)\n");
    }
    fflush(stdout);
    if (!r->log) return;
    JsonBuf b;
    jb_init(&b);
    jb_obj_begin(&b);
    jb_key(&b, "step"); jb_int(&b, m->step);
    jb_key(&b, "loss"); jb_fixed(&b, m->loss, 6);
    jb_key(&b, "lr"); jb_numf(&b, m->lr, 6);
    jb_key(&b, "grad_norm"); jb_numf(&b, m->grad_norm, 6);
    jb_key(&b, "ms"); jb_fixed(&b, m->ms, 3);
    jb_key(&b, "tokens_per_s"); jb_fixed(&b, m->tokens_per_s, 1);
    jb_key(&b, "mfu"); jb_fixed(&b, m->mfu, 5);
    jb_key(&b, "mem_peak_bytes"); jb_int(&b, (int64_t)mem_peak_total());
    mem_object(&b, "mem", mem_peak);
    mem_object(&b, "mem_now", mem_current);
    jb_key(&b, "grad_comm_bytes"); jb_int(&b, (int64_t)m->grad_comm_bytes);
    jb_key(&b, "tp_comm_bytes"); jb_int(&b, (int64_t)m->tp_comm_bytes);
    jb_key(&b, "tp_comm_ms"); jb_fixed(&b, m->tp_comm_ms, 3);
    jb_key(&b, "pp_comm_bytes"); jb_int(&b, (int64_t)m->pp_comm_bytes);
    jb_key(&b, "pp_wait_ms"); jb_fixed(&b, m->pp_wait_ms, 3);
    jb_key(&b, "loss_scale"); jb_num(&b, m->loss_scale);
    jb_key(&b, "skipped"); jb_bool(&b, m->skipped);
    if (m->offload) {   // the optimizer offload's I/O in this step
        jb_key(&b, "io_read_bytes"); jb_int(&b, (int64_t)m->io_read_bytes);
        jb_key(&b, "io_written_bytes"); jb_int(&b, (int64_t)m->io_written_bytes);
        jb_key(&b, "io_wait_ms"); jb_fixed(&b, m->io_wait_ms, 3);
    }
    if (m->spike) { jb_key(&b, "spike"); jb_bool(&b, 1); }
    if (m->tokens.n) source_object(&b, "tokens_by_source", &m->tokens, 0);
    if (m->prof) {   // milliseconds by kind of work, and the rest of the step
        double ms[PROF_NKIND] = {0}, sum = 0;
        for (int i = 0; i < m->prof->n; i++) ms[m->prof->row[i].kind] += m->prof->row[i].seconds * 1e3;
        jb_key(&b, "profile_ms");
        jb_obj_begin(&b);
        for (int k = 0; k < PROF_NKIND; k++) {
            if (k == PROF_CKPT) continue;   // a checkpoint follows the step's record: the table counts it
            jb_key(&b, prof_kind_key(k));
            jb_fixed(&b, ms[k], 3);
            sum += ms[k];
        }
        jb_key(&b, "other");
        jb_fixed(&b, m->ms > sum ? m->ms - sum : 0.0, 3);
        jb_obj_end(&b);
    }
    jb_obj_end(&b);
    write_record(r, &b);
    jb_free(&b);
}

void report_eval(Report *r, int step, double loss, int64_t tokens, double seconds, const SourceFigures *by) {
    clear_bar(r);
    printf("eval  %5d       | val loss %.4f | perplexity %.2f | %lld tokens in %.1f s", step, loss, exp(loss),
           (long long)tokens, seconds);
    for (int i = 0; i < by->n; i++) printf("%s%s %.4f", i ? ", " : " | by source ", by->name[i], by->v[i]);
    printf("\n");
    fflush(stdout);
    if (!r->log) return;
    JsonBuf b;
    jb_init(&b);
    jb_obj_begin(&b);
    jb_key(&b, "step"); jb_int(&b, step);
    jb_key(&b, "val_loss"); jb_fixed(&b, loss, 6);
    jb_key(&b, "val_ppl"); jb_fixed(&b, exp(loss), 4);
    jb_key(&b, "val_tokens"); jb_int(&b, tokens);
    if (by->n) source_object(&b, "val_loss_by_source", by, 6);
    jb_obj_end(&b);
    write_record(r, &b);
    jb_free(&b);
}

void report_progress(Report *r, int step, int total, double elapsed) {
    if (!r->progress) return;
    int width = 30, fill = (int)((double)step / total * width);
    double eta = step ? elapsed / step * (total - step) : 0;
    printf("\r[");
    for (int i = 0; i < width; i++) putchar(i < fill ? '=' : (i == fill ? '>' : ' '));
    printf("] %d/%d  ETA %dm%02ds ", step, total, (int)eta / 60, (int)eta % 60);
    fflush(stdout);
}

// The rows in print order: GEMMs by kind, the slowest shape first, then
// the other kinds in their order.
static int row_order(const void *a, const void *b) {
    const ProfRow *x = a, *y = b;
    if (x->kind != y->kind) return x->kind < y->kind ? -1 : 1;
    return x->seconds > y->seconds ? -1 : x->seconds < y->seconds;
}

void report_profile(Report *r, const Profile *prof, int steps, double seconds, double peak, const char *title,
                    char *(*name)(void *ctx, int in, int out, char *buf, size_t n), void *ctx) {
    clear_bar(r);
    Profile p = *prof;
    qsort(p.row, (size_t)p.n, sizeof p.row[0], row_order);
    double n = steps > 0 ? steps : 1, step_ms = seconds / n * 1e3, all = 0, gemm_s = 0, gemm_f = 0;
    printf("profile:   %s, mean of %d step%s: %.1f ms/step; GFLOP/s against the MFU peak, %.1f (the compute line)\n", title, steps,
           steps == 1 ? "" : "s", step_ms, peak);
    printf("  %-13s %-10s %-24s %7s %9s %6s %9s %8s %8s\n", "work", "layer", "shape (M×K · K×N)", "calls", "ms/step",
           "share", "GFLOP/s", "of peak", "GB/s");
    for (int i = 0; i < p.n; i++) {
        const ProfRow *w = &p.row[i];
        double ms = w->seconds / n * 1e3, gf = w->seconds > 0 ? w->flops / w->seconds * 1e-9 : 0;
        all += w->seconds;
        char shape[40] = "", gfs[16] = "", ceil[16] = "", gbs[16] = "", lname[32];
        const char *layer = "";
        if (w->kind <= PROF_GEMM_DW) {
            // C(M,N) = A(M,K)·B(K,N); the layer's (in, out) features from the kind
            int in = w->kind == PROF_GEMM_FWD ? w->k : w->n, out = w->kind == PROF_GEMM_FWD ? w->n
                                                                : w->kind == PROF_GEMM_DX ? w->k : w->m;
            if (name) layer = name(ctx, in, out, lname, sizeof lname);
            snprintf(shape, sizeof shape, "%d×%d · %d×%d", w->m, w->k, w->k, w->n);
            gemm_s += w->seconds;
            gemm_f += w->flops;
        }
        if (w->flops > 0) {
            snprintf(gfs, sizeof gfs, "%.1f", gf);
            if (peak > 0) snprintf(ceil, sizeof ceil, "%.1f%%", 100 * gf / peak);
        }
        if (w->bytes > 0 && w->seconds > 0) snprintf(gbs, sizeof gbs, "%.1f", w->bytes / w->seconds * 1e-9);
        printf("  %-13s %-10s %-24s %7.0f %9.2f %5.1f%% %9s %8s %8s\n", prof_kind_name(w->kind), layer, shape,
               w->calls / n, ms, step_ms > 0 ? 100 * ms / step_ms : 0.0, gfs, ceil, gbs);
    }
    double other = seconds - all > 0 ? (seconds - all) / n * 1e3 : 0.0;
    printf("  %-13s %-10s %-24s %7s %9.2f %5.1f%%\n", "other", "", "(outside the rows above)", "", other,
           step_ms > 0 ? 100 * other / step_ms : 0.0);
    if (gemm_s > 0)
        printf("  %-13s %-10s %-24s %7s %9.2f %5.1f%% %9.1f %7.1f%%\n", "all GEMMs", "", "", "", gemm_s / n * 1e3,
               step_ms > 0 ? 100 * gemm_s / n * 1e3 / step_ms : 0.0, gemm_f / gemm_s * 1e-9,
               peak > 0 ? 100 * gemm_f / gemm_s * 1e-9 / peak : 0.0);
    fflush(stdout);
}

void report_memory(Report *r) {
    (void)r;
    char b[32], c[32];
    printf("memory:    per rank, peak (now): ");
    for (int t = 0; t < MEM_NTAGS; t++) {
        if (!mem_peak(t)) continue;
        printf("%s %s", mem_tag_name(t), mem_fmt(mem_peak(t), b, sizeof b));
        if (mem_current(t) != mem_peak(t)) printf(" (%s)", mem_fmt(mem_current(t), c, sizeof c));
        printf(", ");
    }
    printf("total %s", mem_fmt(mem_peak_total(), b, sizeof b));
    if (mem_offload()) printf("; offload %s on disk", mem_fmt(mem_offload(), b, sizeof b));
    printf("\n");
}
