// cli/flags — the command-line and --config parser shared by subcommands,
// and the one-line error they exit with.
//
// A subcommand describes its flags in a table; values come from an optional
// JSON config file (keys are flag names without the dashes) and then from
// argv, which wins. Every value is checked against its type and range, and
// an error is one line naming the flag.
#ifndef TSR_CLI_FLAGS_H
#define TSR_CLI_FLAGS_H

#include <stdint.h>

#include "core/check.h"
#include "core/json.h"

typedef enum { FLAG_INT, FLAG_U64, FLAG_FLOAT, FLAG_STR, FLAG_BOOL } FlagType;

typedef struct Flag {
    const char *name;     // without dashes: "batch"
    FlagType type;
    void *dst;            // int*, uint64_t*, double*, const char**, int*
    double min, max;      // range for numbers
    const char *metavar;  // "N", "X", "PATH"
    const char *help;
    int seen;             // set when given
} Flag;

// Parses argv[0..argc) into the flags. "--help" sets *help. A "--config FILE"
// (when the table has a "config" flag) is read first. Strings point into
// argv or into *cfg_json (kept alive by the caller, freed with json_free).
// Positional arguments are errors.
int flags_parse(Flag *flags, int n, int argc, char **argv, const char *cmd, int *help, Json **cfg_json, Err *err);

// Prints "  --name METAVAR   help" lines.
void flags_print(const Flag *flags, int n);

// The flag named name, or NULL.
Flag *flags_find(Flag *flags, int n, const char *name);

// Prints "tessera <cmd>: <message>" to stderr and returns the exit status for e.
int cli_fail(const char *cmd, const Err *e);

#endif
