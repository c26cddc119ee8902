// mpi_allreduce — OpenMPI's own MPI_Allreduce (float, sum) for the sizes of
// comm-bench, as the reference row of make bench. Run under mpirun.
//   mpirun -np 2 mpi_allreduce MIN_BYTES MAX_BYTES ITERS
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int me, n;
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    size_t lo = argc > 1 ? strtoull(argv[1], NULL, 10) : 8, hi = argc > 2 ? strtoull(argv[2], NULL, 10) : 1 << 26;
    int iters = argc > 3 ? atoi(argv[3]) : 20;
    float *x = malloc(hi + 64), *y = malloc(hi + 64);
    memset(x, 0, hi + 64);
    if (me == 0) printf("# MPI_Allreduce (OpenMPI): %d ranks, float32, sum\n%14s %12s %12s %12s %12s\n", n, "bytes",
                        "count", "time(us)", "algbw(GB/s)", "busbw(GB/s)");
    for (int w = 0; w < 1000; w++) MPI_Allreduce(x, y, 2, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);   // connections up
    for (size_t b = lo; b <= hi; b *= 2) {
        int count = (int)(b / 4 ? b / 4 : 1), it = b * (size_t)iters > ((size_t)2 << 30) ? 3 : iters;
        for (int w = 0; w < 5; w++) MPI_Allreduce(x, y, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        for (int i = 0; i < it; i++) MPI_Allreduce(x, y, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        double t = (MPI_Wtime() - t0) / it, tm;
        MPI_Allreduce(&t, &tm, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        double algbw = count * 4.0 / tm * 1e-9;
        if (me == 0) printf("%14zu %12d %12.2f %12.3f %12.3f\n", (size_t)count * 4, count, tm * 1e6, algbw, algbw * 2.0 * (n - 1) / n);
    }
    free(x);
    free(y);
    MPI_Finalize();
    return 0;
}
