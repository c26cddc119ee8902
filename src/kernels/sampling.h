// kernels/sampling — drawing the next token from a row of logits: greedy,
// or at a temperature among the top k, in time linear in the vocabulary.
#ifndef TSR_KERNELS_SAMPLING_H
#define TSR_KERNELS_SAMPLING_H

// The k-th largest of a[0..n) (1 <= k <= n), counting equal values apart
// (the value a descending sort puts at place k − 1); a is reordered.
// Hoare's selection (quickselect): O(n) on average.
float sampling_kth_largest(float *a, int n, int k);

// A token drawn from logits (V) at temperature (<= 0: the argmax, the first
// of equal maxima) among the top_k most likely (0 or >= V: all), with u
// uniform in [0,1): the first token whose running sum of
// exp((logit − max) / temperature), in token order over the candidates,
// passes u times their total. The candidates are the logits at or above
// the k-th largest, so ties at the cut all stay in. scratch holds V floats.
int sampling_pick(const float *logits, int V, double temperature, int top_k, double u, float *scratch);

#endif
