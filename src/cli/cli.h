// cli/cli — the subcommands of the `tessera` binary. Each returns the
// process exit status: 0 success, 1 failure while running, 2 bad usage or input.
#ifndef TSR_CLI_CLI_H
#define TSR_CLI_CLI_H

#include <stddef.h>

#include "comm/run.h"
#include "core/check.h"
#include "train/trainer.h"

int cmd_train(int argc, char **argv);
int cmd_sample(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_eval(int argc, char **argv);
int cmd_prepare(int argc, char **argv);
int cmd_export(int argc, char **argv);
int cmd_import(int argc, char **argv);
int cmd_ckpt(int argc, char **argv);
int cmd_comm_bench(int argc, char **argv);
// comm-bench --disk DIR (cli/diskbench.c): the optimizer offload's bandwidth
// over bytes of files under dir, timed over passes after warmup ones. 0, or
// -1 with e.
int disk_bench(const char *dir, size_t bytes, int passes, int warmup, Err *e);
// The bandwidth of disk_bench's passes, without printing: *gbps (GB/s read
// and written together), *files the files' bytes. 0, or -1 with e.
int disk_probe(const char *dir, size_t bytes, int passes, int warmup, double *gbps, size_t *files, Err *e);
int cmd_plan(int argc, char **argv);
// train's ranks through comm_run (world of them, each rank_main(arg));
// with max > 0, a run whose ranks failed (not a usage error) starts again
// from tc->ckpt_dir's latest checkpoint after delay seconds, up to max
// times, each restart printed and logged to tc->log_path (cli/restart.c).
// 0, or the exit status, the failure reported.
int train_launch(TrainConfig *tc, int world, CommRankMain rank_main, void *arg, double timeout, int max, double delay);
int cmd_plot(int argc, char **argv);

#endif
