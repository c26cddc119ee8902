// tessera — train GPT-2 and LLaMA-style language models in C.
#include <signal.h>
#include <stdatomic.h>
#include <unistd.h>
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "parallel/offload.h"

static const char *usage =
    "usage: tessera <command> [flags]   (tessera <command> --help for its flags)\n"
    "\n"
    "commands:\n"
    "  prepare     tokenize text files into token shards\n"
    "  train       train a model on shards or a text file (fp32, bf16 or fp16; data, tensor and pipeline parallel, ZeRO 1-3:\n"
    "              --nproc/--dp/--tp/--sp/--pp/--zero, or mpirun)\n"
    "  eval        validation loss and perplexity of a checkpoint\n"
    "  sample      generate text from a checkpoint\n"
    "  tokenize    text on stdin to token ids and back (--decode)\n"
    "  export      checkpoint -> Hugging Face safetensors: a GPT-2 file, or a GPT-2, LLaMA or Qwen2 model directory\n"
    "  import      Hugging Face GPT-2, LLaMA or Qwen2 weights (a model directory or a GPT-2 file) -> step-0 checkpoint\n"
    "  ckpt        ckpt info PATH: contents, checksums verified; ckpt diff A B: largest parameter difference\n"
    "  comm-bench  collective bandwidth and latency (--nproc N ranks, or under mpirun)\n"
    "  plan        memory, FLOPs, communication and time for any model on any cluster; the best layout\n"
    "  plot        runs' metrics (train --log JSONL) as one SVG: a panel per metric, runs overlaid\n"
    "\n"
    "examples:\n"
    "  tessera prepare --input ../shared/data/tinyshakespeare.txt --out data/shakespeare\n"
    "  tessera train --model gpt2-tiny --data data/shakespeare --steps 300 --ckpt-dir runs/tiny\n"
    "  tessera sample --ckpt runs/tiny --prompt \"ROMEO:\" --tokens 200\n"
    "  tessera train --model gpt2-tiny --data data/shakespeare --nproc 2 --dp 2 --zero 3\n"
    "  tessera train --model gpt2-tiny --data data/shakespeare --nproc 4 --dp 2 --tp 2 --sp\n"
    "  tessera plan --model llama2-70b --devices 64 --global-batch 1024 --tokens 2e12\n"
    "  tessera plot runs/tiny.jsonl runs/tiny-bf16.jsonl --out runs/tiny.svg --log-loss\n"
    "\n"
    "exit status: 0 success, 1 failure while running, 2 bad usage or input\n";

// A page of an offloaded parameters' file that cannot be read (the device
// failed, or the file was cut short underneath) raises SIGBUS in whatever
// touched it: one line naming the file, exit 1 (write and _exit only).
static void on_sigbus(int sig, siginfo_t *si, void *uc) {
    (void)sig, (void)uc;
    const char *path = offload_fault_path(si->si_addr);
    static const char pre[] = "tessera: ", post[] = ": cannot read the offloaded parameters (an I/O error, or the file was cut short underneath)\n";
    if (!path) {
        signal(SIGBUS, SIG_DFL);   // not an offload's: the default action
        raise(SIGBUS);
        return;
    }
    // Threads that fault on the same file at once (the update's, a gather's)
    // leave the line to the first, which ends the process.
    static atomic_flag said = ATOMIC_FLAG_INIT;
    if (atomic_flag_test_and_set(&said))
        for (;;) pause();
    ssize_t w = write(2, pre, sizeof pre - 1);
    w = write(2, path, strlen(path));
    w = write(2, post, sizeof post - 1);
    (void)w;
    _exit(1);
}

int main(int argc, char **argv) {
    struct sigaction sa = {0};
    sa.sa_sigaction = on_sigbus;
    sa.sa_flags = SA_SIGINFO;
    sigaction(SIGBUS, &sa, NULL);
    // A write past `ulimit -f` fails with EFBIG, which the writers report
    // (naming the file, removing their temporaries) instead of the process
    // dying silently.
    signal(SIGXFSZ, SIG_IGN);
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        fputs(usage, argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "--version")) {
        puts("tessera 0.1");
        return 0;
    }
    if (!strcmp(argv[1], "train")) return cmd_train(argc - 2, argv + 2);
    if (!strcmp(argv[1], "sample")) return cmd_sample(argc - 2, argv + 2);
    if (!strcmp(argv[1], "tokenize")) return cmd_tokenize(argc - 2, argv + 2);
    if (!strcmp(argv[1], "eval")) return cmd_eval(argc - 2, argv + 2);
    if (!strcmp(argv[1], "prepare")) return cmd_prepare(argc - 2, argv + 2);
    if (!strcmp(argv[1], "export")) return cmd_export(argc - 2, argv + 2);
    if (!strcmp(argv[1], "import")) return cmd_import(argc - 2, argv + 2);
    if (!strcmp(argv[1], "ckpt")) return cmd_ckpt(argc - 2, argv + 2);
    if (!strcmp(argv[1], "comm-bench")) return cmd_comm_bench(argc - 2, argv + 2);
    if (!strcmp(argv[1], "plan")) return cmd_plan(argc - 2, argv + 2);
    if (!strcmp(argv[1], "plot")) return cmd_plot(argc - 2, argv + 2);
    fprintf(stderr, "tessera: unknown command '%s' (see tessera --help)\n", argv[1]);
    return 2;
}
