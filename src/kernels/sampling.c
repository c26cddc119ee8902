#include "kernels/sampling.h"

#include <math.h>
#include <string.h>

float sampling_kth_largest(float *a, int n, int k) {
    int lo = 0, hi = n - 1, t = k - 1;   // t: the place of the answer in descending order
    while (lo < hi) {
        float p = a[lo + (hi - lo) / 2];
        int i = lo - 1, j = hi + 1;
        for (;;) {   // a[lo..j] >= p >= a[j+1..hi]
            do i++; while (a[i] > p);
            do j--; while (a[j] < p);
            if (i >= j) break;
            float x = a[i]; a[i] = a[j]; a[j] = x;
        }
        if (t <= j) hi = j;
        else lo = j + 1;
    }
    return a[t];
}

int sampling_pick(const float *logits, int V, double temperature, int top_k, double u, float *scratch) {
    int best = 0;
    for (int v = 1; v < V; v++) if (logits[v] > logits[best]) best = v;
    if (temperature <= 0) return best;
    float cut = -INFINITY;
    if (top_k > 0 && top_k < V) {
        memcpy(scratch, logits, (size_t)V * sizeof *scratch);
        cut = sampling_kth_largest(scratch, V, top_k);
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
