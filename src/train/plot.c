#include "train/plot.h"

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/fileio.h"
#include "core/json.h"
#include "data/unicode.h"

// What a panel can show: the record key it reads, the axis label with its
// unit, the factor from the record's unit to the label's, and whether it is
// a loss (the panels --log-loss puts on a log scale).
typedef struct Metric {
    const char *name, *key, *label;
    double scale;
    int loss;
} Metric;

static const Metric metrics[] = {
    {"loss", "loss", "training loss (nats per token)", 1.0, 1},
    {"val_loss", "val_loss", "validation loss (nats per token)", 1.0, 1},
    {"lr", "lr", "learning rate", 1.0, 0},
    {"tokens_per_s", "tokens_per_s", "throughput (tokens/s)", 1.0, 0},
    {"mem", "mem_peak_bytes", "peak memory per rank (MiB)", 1.0 / 1048576.0, 0},
    {"grad_norm", "grad_norm", "gradient norm (before clipping)", 1.0, 0},
    {"ms", "ms", "step time (ms)", 1.0, 0},
    {"mfu", "mfu", "MFU (%)", 100.0, 0},
    {"loss_scale", "loss_scale", "fp16 loss scale", 1.0, 0},
};
enum { NMETRIC = sizeof metrics / sizeof metrics[0] };

struct PlotRun {
    int n[NMETRIC];
    double *x[NMETRIC], *y[NMETRIC];   // steps ascending, one value per step
    int dropped[NMETRIC];              // values of records whose step cannot be drawn
};

// The largest magnitude drawn: the span of two values and its margins stay
// finite (±1e308 on one axis would make the scale inf and the coordinates NaN).
#define PLOT_MAX 1e300

// Whether a value can be drawn on the axis: finite, within ±PLOT_MAX, and
// above 0 on a log scale.
static int drawable(double v, int logy) { return isfinite(v) && fabs(v) <= PLOT_MAX && (!logy || v > 0); }

const char *plot_metric_names(void) { return "loss, val_loss, lr, tokens_per_s, mem, grad_norm, ms, mfu, loss_scale"; }

static int metric_of(const char *name, size_t len) {
    for (int m = 0; m < NMETRIC; m++)
        if (strlen(metrics[m].name) == len && !strncmp(metrics[m].name, name, len)) return m;
    return -1;
}

// The metrics of a comma-separated list, in order, into which[] (at most
// NMETRIC); their count, or -1 with err.
static int parse_metrics(const char *list, int *which, Err *err) {
    int n = 0;
    for (const char *p = list;;) {
        const char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        int m = metric_of(p, len);
        if (m < 0 || n == NMETRIC)
            return err_set(err, ERR_USAGE, "--metrics: '%.*s' is not a metric (known: %s)", (int)len, p,
                           plot_metric_names());
        which[n++] = m;
        if (!e) break;
        p = e + 1;
    }
    return n;
}

int plot_check_metrics(const char *list, Err *err) {
    int which[NMETRIC];
    return parse_metrics(list, which, err) < 0 ? -1 : 0;
}

// ---- reading a run ----

typedef struct Point {
    double x, y;
    size_t order;   // the record's place in the file: the later of equal steps wins
} Point;

static int by_step(const void *a, const void *b) {
    const Point *p = a, *q = b;
    if (p->x != q->x) return p->x < q->x ? -1 : 1;
    return p->order < q->order ? -1 : p->order > q->order;
}

void plot_run_free(PlotRun *r) {
    if (!r) return;
    for (int m = 0; m < NMETRIC; m++) {
        free(r->x[m]);
        free(r->y[m]);
    }
    free(r);
}

int plot_run_load(PlotRun **out, const char *path, Err *err) {
    *out = NULL;
    char *text;
    size_t len;
    if (file_read(path, &text, &len, (size_t)1 << 30, err)) return -1;
    PlotRun *r = calloc(1, sizeof *r);
    Point *pts[NMETRIC] = {0};
    size_t cap[NMETRIC] = {0}, cnt[NMETRIC] = {0}, order = 0;
    int rc = r ? 0 : err_set(err, ERR_RUN, "out of memory");
    int line = 0;
    for (char *p = text; !rc && p < text + len; line++) {
        char *e = memchr(p, '\n', (size_t)(text + len - p));
        size_t n = e ? (size_t)(e - p) : (size_t)(text + len - p);
        char *next = e ? e + 1 : text + len;
        while (n && (p[n - 1] == '\r' || p[n - 1] == ' ')) n--;
        if (n == 0) { p = next; continue; }
        Err je;
        Json *j = json_parse(p, n, &je);
        const Json *step = j ? json_get(j, "step") : NULL;
        if (!j || j->type != JSON_OBJ) {
            // the parser counts lines within the one line it was given
            const char *why = !j ? je.msg : "not a JSON object", *at = strstr(why, "line 1 col");
            rc = err_set(err, ERR_USAGE, "%s:%d: not a metrics record (%s%s)", path, line + 1, at ? "" : why,
                         at ? at + 7 : "");
        } else if (step && step->type == JSON_NUM) {
            for (int m = 0; m < NMETRIC && !rc; m++) {
                const Json *v = json_get(j, metrics[m].key);
                if (!v || v->type != JSON_NUM) continue;
                if (!drawable(step->num, 0)) { r->dropped[m]++; continue; }   // no place on the step axis
                if (cnt[m] == cap[m]) {
                    size_t c = cap[m] ? 2 * cap[m] : 256;
                    Point *np = realloc(pts[m], c * sizeof *np);
                    if (!np) { rc = err_set(err, ERR_RUN, "out of memory"); break; }
                    pts[m] = np;
                    cap[m] = c;
                }
                pts[m][cnt[m]++] = (Point){step->num, v->num * metrics[m].scale, order++};
            }
        }
        json_free(j);
        p = next;
    }
    size_t total = 0;
    for (int m = 0; !rc && m < NMETRIC; m++) {
        total += (size_t)r->dropped[m];   // a record that cannot be drawn is still a record: its panel says so
        // steps ascending; of the records of one step, the last one written
        if (cnt[m]) qsort(pts[m], cnt[m], sizeof *pts[m], by_step);
        r->x[m] = malloc((cnt[m] + 1) * sizeof(double));
        r->y[m] = malloc((cnt[m] + 1) * sizeof(double));
        if (!r->x[m] || !r->y[m]) { rc = err_set(err, ERR_RUN, "out of memory"); break; }
        int k = 0;
        for (size_t i = 0; i < cnt[m]; i++) {
            if (i + 1 < cnt[m] && pts[m][i + 1].x == pts[m][i].x) continue;
            r->x[m][k] = pts[m][i].x;
            r->y[m][k++] = pts[m][i].y;
        }
        r->n[m] = k;
        total += (size_t)k;
    }
    if (!rc && total == 0)
        rc = err_set(err, ERR_USAGE, "%s: no step or evaluation records (a file `tessera train --log` writes)", path);
    for (int m = 0; m < NMETRIC; m++) free(pts[m]);
    free(text);
    if (rc) { plot_run_free(r); return -1; }
    *out = r;
    return 0;
}

// ---- writing SVG ----

typedef struct Sb {
    char *s;
    size_t len, cap;
    int oom;
} Sb;

static void sb_printf(Sb *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(Sb *b, const char *fmt, ...) {
    if (b->oom) return;
    if (!b->s) {
        if (!(b->s = malloc(4096))) { b->oom = 1; return; }
        b->cap = 4096;
    }
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(b->s + b->len, b->cap - b->len, fmt, ap);
        va_end(ap);
        if (n < 0) { b->oom = 1; return; }
        if ((size_t)n < b->cap - b->len) { b->len += (size_t)n; return; }
        size_t c = b->cap * 2 + (size_t)n + 1024;
        char *s = realloc(b->s, c);
        if (!s) { b->oom = 1; return; }
        b->s = s;
        b->cap = c;
    }
}

// Text for XML: & < > " escaped; what XML cannot hold (control bytes, the
// non-characters U+FFFE/U+FFFF) and bytes that are not UTF-8 each become
// U+FFFD, so that any file name gives a valid document.
static void sb_text(Sb *b, const char *t) {
    const unsigned char *s = (const unsigned char *)t;
    for (size_t n = strlen(t); n;) {
        uint32_t cp;
        int len = utf8_next(s, n, &cp);
        if (cp == '&') sb_printf(b, "&amp;");
        else if (cp == '<') sb_printf(b, "&lt;");
        else if (cp == '>') sb_printf(b, "&gt;");
        else if (cp == '"') sb_printf(b, "&quot;");
        else if (cp < 0x20 || (cp >= 0x7F && cp <= 0x9F) || cp == 0xFFFE || cp == 0xFFFF || cp > 0x10FFFF)
            sb_printf(b, "\xEF\xBF\xBD");   // U+FFFD REPLACEMENT CHARACTER
        else sb_printf(b, "%.*s", len, (const char *)s);
        s += len;
        n -= (size_t)len;
    }
}

static const char *palette[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"};
enum { NCOLOR = sizeof palette / sizeof palette[0] };

// A tick label: at most 4 significant digits, exponents for the very large
// and very small.
static void fmt_tick(char *buf, size_t n, double v) {
    double a = fabs(v);
    if (a < 1e-12) snprintf(buf, n, "0");
    else if (a >= 1e5 || a < 1e-3) snprintf(buf, n, "%.3g", v);
    else snprintf(buf, n, "%.4g", v);
}

// Ticks at round numbers (1, 2 or 5 × 10^k apart) covering [lo, hi], about
// `want` of them; their count (at most 32).
static int nice_ticks(double lo, double hi, int want, double *t) {
    double raw = (hi - lo) / want, e = pow(10.0, floor(log10(raw))), f = raw / e;
    double step = (f < 1.5 ? 1.0 : f < 3.5 ? 2.0 : f < 7.5 ? 5.0 : 10.0) * e;
    int n = 0;
    for (double v = ceil(lo / step - 1e-9) * step; v <= hi + step * 1e-9 && n < 32; v += step)
        t[n++] = fabs(v) < step * 1e-9 ? 0.0 : v;
    return n;
}

// Log-scale ticks for [lo, hi] (log10 values): the powers of ten, and their
// 2× and 5× within two decades or less; within less than one decade, round
// numbers as on a linear axis, at their logarithms.
static int log_ticks(double lo, double hi, double *t) {
    int n = 0;
    if (hi - lo < 1.0) {
        n = nice_ticks(pow(10.0, lo), pow(10.0, hi), 5, t);
        for (int i = 0; i < n; i++) t[i] = log10(t[i]);
        return n;
    }
    for (double d = floor(lo); d <= ceil(hi) && n < 30; d++) {
        static const double mult[] = {1, 2, 5};
        for (int k = 0; k < 3; k++) {
            if (k > 0 && hi - lo > 2.0) break;
            double v = d + log10(mult[k]);
            if (v >= lo - 1e-9 && v <= hi + 1e-9) t[n++] = v;
        }
    }
    return n;
}

// Each point's trailing mean over the finite values among it and the w − 1
// points before it (w <= 1: the values themselves), in O(n) for any w: the
// points fall in blocks of w, and a window [i − w + 1, i] is the tail of one
// block and the head of the next, so it is a suffix sum plus a prefix sum
// (van Herk / Gil-Werman). Every sum only adds, as the direct definition
// does: no running total that subtracts, so no cancellation when a large
// value leaves the window. 0, or -1 out of memory.
static int smooth(const double *y, int n, int w, double *out) {
    if (w <= 1) {
        memcpy(out, y, (size_t)n * sizeof *y);
        return 0;
    }
    double *pre = malloc((size_t)n * 4 * sizeof *pre);
    if (!pre) return -1;
    double *npre = pre + n, *suf = npre + n, *nsuf = suf + n;   // sums and counts of the finite values
    for (int i = 0; i < n; i++) {   // from each block's start to i
        int f = isfinite(y[i]), first = i % w == 0;
        pre[i] = (first ? 0 : pre[i - 1]) + (f ? y[i] : 0);
        npre[i] = (first ? 0 : npre[i - 1]) + f;
    }
    for (int i = n - 1; i >= 0; i--) {   // from i to its block's end
        int f = isfinite(y[i]), last = i == n - 1 || (i + 1) % w == 0;
        suf[i] = (last ? 0 : suf[i + 1]) + (f ? y[i] : 0);
        nsuf[i] = (last ? 0 : nsuf[i + 1]) + f;
    }
    for (int i = 0; i < n; i++) {
        int j = i - w + 1;   // the window's first point
        // within one block (the first points, or a window that is a whole block), or across two
        int one = j <= 0 || j % w == 0;
        double s = one ? pre[i] : suf[j] + pre[i], k = one ? npre[i] : nsuf[j] + npre[i];
        out[i] = isfinite(y[i]) && k > 0 ? s / k : y[i];
    }
    free(pre);
    return 0;
}

typedef struct Frame {
    double x0, y0, w, h;           // the plot area in pixels
    double xlo, xhi, ylo, yhi;     // the data range it shows (y in log10 on a log scale)
    int logy;
} Frame;

static double px(const Frame *f, double x) { return f->x0 + (x - f->xlo) / (f->xhi - f->xlo) * f->w; }
static double py(const Frame *f, double y) { return f->y0 + f->h - (y - f->ylo) / (f->yhi - f->ylo) * f->h; }

// One polyline of the points of (x, y) the scale can show, broken where
// one cannot be shown.
static void polyline(Sb *b, const Frame *f, const double *x, const double *y, int n, const char *color, double width,
                     double opacity) {
    int open = 0;
    for (int i = 0; i < n; i++) {
        double v = f->logy ? (y[i] > 0 ? log10(y[i]) : NAN) : y[i];
        if (!isfinite(v)) {
            if (open) sb_printf(b, "\"/>\n");
            open = 0;
            continue;
        }
        if (!open)
            sb_printf(b, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"%.1f\" stroke-opacity=\"%.2f\" "
                         "stroke-linejoin=\"round\" points=\"", color, width, opacity);
        sb_printf(b, "%s%.2f,%.2f", open ? " " : "", px(f, x[i]), py(f, v));
        open = 1;
    }
    if (open) sb_printf(b, "\"/>\n");
}

// Each run's line in the panel: the values the axis can draw (the others
// gaps), smoothed over a faint raw line with --smooth, the points of a short
// series (evaluations) marked.
static void draw_runs(Sb *b, const Frame *f, int m, PlotRun *const *runs, int nr, int smooth_w) {
    for (int r = 0; r < nr; r++) {
        const PlotRun *run = runs[r];
        int n = run->n[m];
        if (n == 0) continue;
        const char *c = palette[r % NCOLOR];
        double *y = malloc((size_t)n * 2 * sizeof *y);   // the drawable values, then their smoothing
        if (!y) { b->oom = 1; return; }
        double *s = y + n;
        for (int i = 0; i < n; i++) y[i] = drawable(run->y[m][i], f->logy) ? run->y[m][i] : NAN;
        if (smooth_w > 1) {
            if (smooth(y, n, smooth_w, s)) { b->oom = 1; free(y); return; }
            polyline(b, f, run->x[m], y, n, c, 1.0, 0.3);
            polyline(b, f, run->x[m], s, n, c, 1.8, 1.0);
        } else {
            polyline(b, f, run->x[m], y, n, c, 1.6, 1.0);
        }
        for (int i = 0; n <= 40 && i < n; i++)   // few points (evaluations): each one marked
            if (isfinite(y[i]))
                sb_printf(b, "<circle cx=\"%.2f\" cy=\"%.2f\" r=\"2.5\" fill=\"%s\"/>\n", px(f, run->x[m][i]),
                          py(f, f->logy ? log10(y[i]) : y[i]), c);
        free(y);
    }
}

// One metric's panel at `top`; every panel shows the steps [xlo, xhi], so
// that a step lines up from panel to panel. Values the axis cannot draw are
// left out, and the panel says how many; their count.
static long panel(Sb *b, const Metric *mt, int m, PlotRun *const *runs, int nr, const PlotOptions *o, double top,
                  double width, double xlo, double xhi) {
    Frame f = {.x0 = 78, .y0 = top + 26, .w = width - 78 - 18, .h = 160, .logy = o->log_loss && mt->loss};
    int any = 0;
    long skipped = 0, records = 0;
    double ylo = INFINITY, yhi = -INFINITY;
    for (int r = 0; r < nr; r++) {
        skipped += runs[r]->dropped[m];
        records += runs[r]->dropped[m] + runs[r]->n[m];
        for (int i = 0; i < runs[r]->n[m]; i++) {
            double y = runs[r]->y[m][i];
            if (!drawable(y, f.logy)) { skipped++; continue; }
            y = f.logy ? log10(y) : y;
            any = 1;
            ylo = fmin(ylo, y);
            yhi = fmax(yhi, y);
        }
    }
    sb_printf(b, "<g class=\"panel\" id=\"panel-%s\">\n", mt->name);
    sb_printf(b, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"13\" font-weight=\"bold\">", f.x0, top + 16);
    sb_text(b, mt->label);
    sb_printf(b, "%s</text>\n", f.logy ? " — log scale" : "");
    if (skipped)
        sb_printf(b, "<text class=\"skipped\" x=\"%.1f\" y=\"%.1f\" font-size=\"11\" fill=\"#b00000\" text-anchor=\"end\">"
                     "%ld value%s not drawn (%s)</text>\n", f.x0 + f.w, top + 16, skipped, skipped == 1 ? "" : "s",
                  f.logy ? "not finite, beyond ±1e300 or not above 0" : "not finite or beyond ±1e300");
    sb_printf(b, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"#ffffff\" stroke=\"#888888\"/>\n", f.x0,
              f.y0, f.w, f.h);
    if (!any) {
        sb_printf(b, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"12\" fill=\"#888888\" text-anchor=\"middle\">no %s %s"
                     "</text>\n</g>\n", f.x0 + f.w / 2, f.y0 + f.h / 2, mt->key, records ? "value can be drawn" : "records");
        return skipped;
    }
    if (xhi == xlo) { xlo -= 1; xhi += 1; }
    double pad = yhi > ylo ? 0.05 * (yhi - ylo) : (f.logy ? 0.1 : fabs(yhi) > 0 ? 0.1 * fabs(yhi) : 1.0);
    f.xlo = xlo; f.xhi = xhi; f.ylo = ylo - pad; f.yhi = yhi + pad;
    if (!f.logy && ylo >= 0 && f.ylo < 0) f.ylo = 0;   // a quantity that cannot go negative starts its axis at 0 at most
    double t[32];
    char lab[32];
    int nt = f.logy ? log_ticks(f.ylo, f.yhi, t) : nice_ticks(f.ylo, f.yhi, 5, t);
    for (int i = 0; i < nt; i++) {
        double y = py(&f, t[i]);
        fmt_tick(lab, sizeof lab, f.logy ? pow(10.0, t[i]) : t[i]);
        sb_printf(b, "<line x1=\"%.1f\" y1=\"%.2f\" x2=\"%.1f\" y2=\"%.2f\" stroke=\"#e4e4e4\"/>\n", f.x0, y, f.x0 + f.w, y);
        sb_printf(b, "<line x1=\"%.1f\" y1=\"%.2f\" x2=\"%.1f\" y2=\"%.2f\" stroke=\"#888888\"/>\n", f.x0 - 4, y, f.x0, y);
        sb_printf(b, "<text x=\"%.1f\" y=\"%.2f\" font-size=\"11\" text-anchor=\"end\">%s</text>\n", f.x0 - 6, y + 4, lab);
    }
    nt = nice_ticks(f.xlo, f.xhi, 8, t);
    for (int i = 0; i < nt; i++) {
        double x = px(&f, t[i]);
        fmt_tick(lab, sizeof lab, t[i]);
        sb_printf(b, "<line x1=\"%.2f\" y1=\"%.1f\" x2=\"%.2f\" y2=\"%.1f\" stroke=\"#888888\"/>\n", x, f.y0 + f.h, x,
                  f.y0 + f.h + 4);
        sb_printf(b, "<text x=\"%.2f\" y=\"%.1f\" font-size=\"11\" text-anchor=\"middle\">%s</text>\n", x,
                  f.y0 + f.h + 16, lab);
    }
    sb_printf(b, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\" text-anchor=\"end\" fill=\"#444444\">step</text>\n",
              f.x0 + f.w, f.y0 + f.h + 30);
    draw_runs(b, &f, m, runs, nr, o->smooth);
    sb_printf(b, "</g>\n");
    return skipped;
}

int plot_svg(const char *path, PlotRun *const *runs, const char *const *names, int nr, const PlotOptions *o,
             long *skipped, Err *err) {
    *skipped = 0;
    int which[NMETRIC];
    int nm = parse_metrics(o->metrics ? o->metrics : "loss,val_loss,lr,tokens_per_s,mem", which, err);
    if (nm < 0) return -1;
    double width = o->width > 0 ? o->width : 900;
    // the legend: a row of (swatch, name) pairs, wrapped at the width
    double lx = 78, ly = 22, legend_h;
    Sb leg = {0}, body = {0};
    for (int r = 0; r < nr; r++) {
        double w = 34 + 7.0 * (double)strlen(names[r]);
        if (lx + w > width - 10 && lx > 78) { lx = 78; ly += 18; }
        sb_printf(&leg, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" stroke-width=\"3\"/>\n", lx,
                  ly - 4, lx + 22, ly - 4, palette[r % NCOLOR]);
        sb_printf(&leg, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"12\">", lx + 28, ly);
        sb_text(&leg, names[r]);
        sb_printf(&leg, "</text>\n");
        lx += w + 16;
    }
    legend_h = ly + 12;
    double xlo = INFINITY, xhi = -INFINITY;   // the steps of every panel's records
    for (int i = 0; i < nm; i++)
        for (int r = 0; r < nr; r++)
            if (runs[r]->n[which[i]]) {
                xlo = fmin(xlo, runs[r]->x[which[i]][0]);
                xhi = fmax(xhi, runs[r]->x[which[i]][runs[r]->n[which[i]] - 1]);
            }
    for (int i = 0; i < nm; i++)
        *skipped += panel(&body, &metrics[which[i]], which[i], runs, nr, o, legend_h + i * 228.0, width, xlo, xhi);
    double height = legend_h + nm * 228.0 + 8;
    Sb svg = {0};
    sb_printf(&svg, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
                    "<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" width=\"%.0f\" height=\"%.0f\" "
                    "viewBox=\"0 0 %.0f %.0f\" font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\">\n"
                    "<rect width=\"100%%\" height=\"100%%\" fill=\"#ffffff\"/>\n<g class=\"legend\">\n",
              width, height, width, height);
    sb_printf(&svg, "%s</g>\n%s</svg>\n", leg.s ? leg.s : "", body.s ? body.s : "");
    int rc = 0;
    if (leg.oom || body.oom || svg.oom) rc = err_set(err, ERR_RUN, "out of memory writing %s", path);
    else rc = file_write_whole(path, svg.s, svg.len, err);
    free(leg.s);
    free(body.s);
    free(svg.s);
    return rc;
}
