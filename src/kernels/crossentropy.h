// kernels/crossentropy — fused softmax + cross-entropy over logits rows.
#ifndef TSR_KERNELS_CROSSENTROPY_H
#define TSR_KERNELS_CROSSENTROPY_H

// logits (N,Vp): only the first V columns are real tokens (the rest is
// vocabulary padding and is ignored). targets (N) in [0,V), or -1 to skip
// the row (loss 0, gradient 0).
// losses (N) = -log softmax(logits)[target].
// When dscale != 0, logits is overwritten with its gradient
// dscale · (softmax − onehot(target)), padding columns set to 0 — the
// logits are never kept next to a separate probability buffer.
void crossentropy_forward(float *logits, float *losses, const int *targets, int N, int V, int Vp,
                          float dscale);

#endif
