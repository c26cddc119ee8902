// cli/cli — the subcommands of the `tessera` binary. Each returns the
// process exit status: 0 success, 1 failure while running, 2 bad usage or input.
#ifndef TSR_CLI_CLI_H
#define TSR_CLI_CLI_H

int cmd_train(int argc, char **argv);
int cmd_sample(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_eval(int argc, char **argv);
int cmd_prepare(int argc, char **argv);
int cmd_export(int argc, char **argv);
int cmd_import(int argc, char **argv);
int cmd_ckpt(int argc, char **argv);
int cmd_comm_bench(int argc, char **argv);
int cmd_plan(int argc, char **argv);
int cmd_plot(int argc, char **argv);

#endif
