// kernels/rope — rotary position embeddings (Su et al. 2021) as Hugging
// Face's LlamaForCausalLM applies them: in each head of HS (even) values,
// the pair (i, i + HS/2) of the token at position t turns by the angle
// t·θ^(−2i/HS) (rotate_half), the angle computed in fp32 as there.
#ifndef TSR_KERNELS_ROPE_H
#define TSR_KERNELS_ROPE_H

// In place on rows of B·T tokens (row n is position pos0 + n mod T: pos0 is
// where a pass of incremental decoding starts, else 0; or with pos (B·T)
// given, position pos[n]: its place in its document under document
// masking), each with `heads` heads of HS values from its start and ld
// values apart.
void rope_forward(float *x, const int *pos, int B, int T, int pos0, int heads, int HS, int ld, float theta);
// The transpose (the rotation back), in place on the gradient.
void rope_backward(float *dx, const int *pos, int B, int T, int pos0, int heads, int HS, int ld, float theta);

#endif
