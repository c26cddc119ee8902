// sgemm — the machine's measured SGEMM ceiling in GFLOP/s (2048³, median of 5).
#include <stdio.h>
#include <stdlib.h>

#include "kernels/matmul.h"

int main(int argc, char **argv) {
    kernels_set_threads(argc > 1 ? atoi(argv[1]) : 2);
    printf("%.1f\n", kernels_sgemm_gflops(2048, 5));
    return 0;
}
