// kernels/chunks — sums down the rows of a matrix (bias and norm weight
// gradients) taken over whole rows, in the order memory streams them: the
// rows in fixed chunks, each chunk's sums kept apart (a row of partial
// sums, in L1 while its rows pass), then the chunks' sums added in order.
// The chunks depend on the row count alone, so the bits do not depend on
// the thread count.
#ifndef TSR_KERNELS_CHUNKS_H
#define TSR_KERNELS_CHUNKS_H

#include <stddef.h>

// Chunks of N rows (at most 64 of at least 32 rows; 1 for N ≤ 32); chunk c
// of nc is rows [chunk_lo(N, nc, c), chunk_lo(N, nc, c + 1)).
int chunks_of(int N);
int chunk_lo(int N, int nc, int c);

// The chunks of N rows (*nc of them) and the calling thread's room for
// their partial sums, per floats each (kept and grown from call to call);
// stops the run when the room is not to be had.
float *chunk_room(int N, size_t per, int *nc);

// dst (M) += the sums of nc chunks, chunk c's M at part + c·stride, added
// in chunk order. Shares its columns out as an OpenMP for: inside a
// parallel region among the team, outside on the calling thread.
void chunks_add(float *dst, const float *part, int nc, size_t stride, int M);

#endif
