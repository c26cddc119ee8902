// kernels/sampling against oracles: the k-th largest against a full sort,
// and the drawn token against the selection the sampler used before (k
// passes of a maximum search), on rows with ties, at many temperatures,
// cuts and uniforms.
#include <stdint.h>
#include <string.h>

#include "core/rng.h"
#include "kernels/sampling.h"
#include "test.h"

static int descending(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return x > y ? -1 : x < y;
}

// The old sampler, the reference: the cut by k passes of a maximum search.
static int pick_ref(const float *logits, int V, double temperature, int top_k, double u) {
    int best = 0;
    for (int v = 1; v < V; v++) if (logits[v] > logits[best]) best = v;
    if (temperature <= 0) return best;
    float cut = -INFINITY;
    if (top_k > 0 && top_k < V) {
        float *tmp = malloc((size_t)V * sizeof *tmp);
        memcpy(tmp, logits, (size_t)V * sizeof *tmp);
        for (int i = 0; i < top_k; i++) {
            int m = i;
            for (int v = i + 1; v < V; v++) if (tmp[v] > tmp[m]) m = v;
            float t = tmp[i]; tmp[i] = tmp[m]; tmp[m] = t;
        }
        cut = tmp[top_k - 1];
        free(tmp);
    }
    double sum = 0;
    for (int v = 0; v < V; v++) sum += logits[v] >= cut ? exp((logits[v] - logits[best]) / temperature) : 0;
    double r = u * sum, acc = 0;
    for (int v = 0; v < V; v++) {
        if (logits[v] < cut) continue;
        acc += exp((logits[v] - logits[best]) / temperature);
        if (acc > r) return v;
    }
    return best;
}

// A row of V logits: normal values, or (ties) a few distinct levels.
static void fill(float *x, int V, int levels, uint64_t seed) {
    uint64_t s = rng_stream_of("test_sampling");
    for (int v = 0; v < V; v++) {
        double g = rng_uniform(seed, s, (uint64_t)v);
        x[v] = levels ? (float)(int)(g * levels) : (float)(8 * g - 4);
    }
}

static void test_kth_largest_against_sort(void) {
    static const int Vs[] = {1, 2, 3, 7, 64, 257, 5000};
    int checked = 0;
    for (size_t a = 0; a < sizeof Vs / sizeof *Vs; a++)
        for (int levels = 0; levels <= 3; levels += 3) {
            int V = Vs[a];
            float *x = malloc((size_t)V * sizeof *x), *y = malloc((size_t)V * sizeof *y), *s = malloc((size_t)V * sizeof *s);
            fill(x, V, levels, (uint64_t)(V * 10 + levels));
            memcpy(s, x, (size_t)V * sizeof *s);
            qsort(s, (size_t)V, sizeof *s, descending);
            for (int k = 1; k <= V; k += k < 10 ? 1 : V / 7 + 1) {
                memcpy(y, x, (size_t)V * sizeof *y);
                float got = sampling_kth_largest(y, V, k);
                EXPECT(got == s[k - 1], "V %d, %d levels, k %d: %g, sorted %g", V, levels, k, got, s[k - 1]);
                checked++;
            }
            memcpy(y, x, (size_t)V * sizeof *y);   // the last place too
            EXPECT(sampling_kth_largest(y, V, V) == s[V - 1], "V %d, k = V", V);
            free(x); free(y); free(s);
        }
    EXPECT(checked > 80, "%d cases", checked);
}

static void test_pick_as_before(void) {
    static const int Vs[] = {2, 50, 256, 1000};
    static const int ks[] = {0, 1, 2, 5, 40, 255, 999, 5000};
    static const double temps[] = {0, 0.3, 0.8, 1.0, 2.5};
    int n = 0, diff = 0;
    uint64_t su = rng_stream_of("test_sampling_u");
    for (size_t a = 0; a < sizeof Vs / sizeof *Vs; a++)
        for (int levels = 0; levels <= 4; levels += 4) {
            int V = Vs[a];
            float *x = malloc((size_t)V * sizeof *x), *scratch = malloc((size_t)V * sizeof *scratch);
            fill(x, V, levels, (uint64_t)(V + levels));
            for (size_t b = 0; b < sizeof ks / sizeof *ks; b++)
                for (size_t c = 0; c < sizeof temps / sizeof *temps; c++)
                    for (int i = 0; i < 20; i++, n++) {
                        double u = rng_uniform(7, su, (uint64_t)n);
                        int got = sampling_pick(x, V, temps[c], ks[b], u, scratch), want = pick_ref(x, V, temps[c], ks[b], u);
                        if (got != want && diff++ < 5)
                            fprintf(stderr, "  V %d levels %d k %d T %g u %.17g: %d, before %d\n", V, levels, ks[b], temps[c], u,
                                    got, want);
                    }
            free(x);
            free(scratch);
        }
    EXPECT(diff == 0, "%d of %d draws differ from the old sampler's", diff, n);
}

// The candidates are the top k: at a high temperature every draw is one of
// them, and a cut that ties keeps every tied token.
static void test_pick_stays_in_top_k(void) {
    float x[8] = {1, 5, 3, 5, 2, 4, 0, 3};   // descending: 5 5 4 3 3 2 1 0
    float scratch[8];
    int seen[8] = {0};
    for (int i = 0; i < 2000; i++) seen[sampling_pick(x, 8, 50.0, 4, (i + 0.5) / 2000, scratch)]++;
    EXPECT(seen[1] && seen[3] && seen[5] && seen[2] && seen[7], "top 4 with a tie at the cut (3): all of 1,3,5,2,7 drawn");
    EXPECT(!seen[0] && !seen[4] && !seen[6], "below the cut drawn: %d %d %d", seen[0], seen[4], seen[6]);
    EXPECT(sampling_pick(x, 8, 0, 3, 0.9, scratch) == 1, "greedy: the first of the equal maxima");
}

int main(void) {
    RUN(test_kth_largest_against_sort);
    RUN(test_pick_as_before);
    RUN(test_pick_stays_in_top_k);
    return test_finish();
}
