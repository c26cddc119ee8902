// kernels/threads — the thread count every kernel runs on: OpenMP's, and
// BLAS's, set together. The products (kernels/gemm, kernels/gemm_bf16,
// kernels/matmul) and the pointwise kernels all read it here.
#ifndef TSR_KERNELS_THREADS_H
#define TSR_KERNELS_THREADS_H

// Sets the threads of both OpenMP kernels and BLAS. With Debian's OpenMP
// build of OpenBLAS they are one pool; BLAS called inside an OpenMP parallel
// region runs on the calling thread.
void kernels_set_threads(int n);
// The threads set, or OpenMP's default before any.
int kernels_threads(void);

// fn(arg, lo, hi) over the items [0, n), in chunks of `chunk` items that
// the nt threads take one at a time, each the next chunk as it finishes
// its last: a thread whose core runs slower (a neighbour on a shared host,
// interrupts) takes fewer, where equal contiguous shares would keep the
// others waiting for it. Each item runs whole on one thread, so no result
// depends on which. One thread: fn(arg, 0, n), without entering OpenMP
// (a team's setup costs microseconds a call).
typedef void (*ChunkFn)(const void *arg, long lo, long hi);
void threads_chunks(int nt, long n, long chunk, ChunkFn fn, const void *arg);
// The chunk for n items of `flops` each on nt threads: whole runs of
// `unit` items (the caller's natural run, 1 for none) that add up to about
// CHUNK_FLOPS, but no more items than leave each thread 8 chunks. A
// thread claims each chunk with an atomic add on a line the threads share,
// which moves between cores at every claim: a microsecond on a VM. Chunks
// of one tile (a few microseconds of work) cost 2-3% of a bf16 step there.
enum { CHUNK_FLOPS = 32 << 20 };
long threads_chunk(long n, int nt, long unit, double flops);

// Inside a parallel region, every thread of the team with the same
// *failed (0 at the region's start) and its own ok: 1 for every thread
// when any thread's ok is 0, else 0 — the answer after a barrier, so the
// team stops or goes on together (a thread that could not have its
// buffers leaves the output untouched for every other).
int threads_any_failed(int *failed, int ok);

#endif
