// cli/flags — the command-line and --config parser shared by subcommands,
// and the one-line error they exit with.
//
// A subcommand describes its flags in a table; values come from an optional
// JSON config file (keys are flag names without the dashes) and then from
// argv, which wins. Every value is checked against its type and range, and
// an error is one line naming the flag.
//
// On the command line "--name=V" gives V. "--name V" gives V when V does not
// start with "--"; a FLAG_BOOL takes only a following true, false, 1 or 0,
// and an int or float flag without a bare value takes V even when it starts with
// "--" (an odd value is then a parse error naming the flag). A flag left
// without a value gets its bare value, and without one that is the error
// "--name: missing value".
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
    const char *bare;     // value when given without one ("--resume" alone); NULL: a value is
                          // required, except for FLAG_BOOL, which is then "true"
} Flag;

// Parses argv[0..argc) into the flags. "--help" sets *help. A "--config FILE"
// (when the table has a "config" flag) is read first. Strings point into
// argv, into *cfg_json (kept alive by the caller, freed with json_free) or
// at a flag's bare value; argv itself is not changed. Positional arguments
// are errors.
int flags_parse(Flag *flags, int n, int argc, char **argv, const char *cmd, int *help, Json **cfg_json, Err *err);

// Prints "  --name METAVAR   help" lines; "--name [METAVAR]" for a flag with
// a bare value (a metavar already in brackets is kept), "--name" for a FLAG_BOOL.
void flags_print(const Flag *flags, int n);

// The flag named name, or NULL.
Flag *flags_find(Flag *flags, int n, const char *name);

// Prints "tessera <cmd>: <message>" to stderr and returns the exit status for e.
int cli_fail(const char *cmd, const Err *e);

#endif
