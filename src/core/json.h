// core/json — a small strict JSON reader and writer (RFC 8259).
//
// The reader builds a tree; it rejects what RFC 8259 rejects (trailing
// commas, leading zeros, unescaped control characters, lone surrogates,
// invalid UTF-8, trailing garbage) plus duplicate object keys and nesting
// deeper than 64. Numbers keep their text so integers up to 2^63 read exactly.
// The writer appends to a growable buffer and places commas itself.
#ifndef TSR_CORE_JSON_H
#define TSR_CORE_JSON_H

#include <stddef.h>
#include <stdint.h>

#include "core/check.h"

typedef enum { JSON_NULL, JSON_BOOL, JSON_NUM, JSON_STR, JSON_ARR, JSON_OBJ } JsonType;

typedef struct Json {
    JsonType type;
    char *key;            // member name when inside an object, else NULL
    int boolean;          // JSON_BOOL
    double num;           // JSON_NUM
    char *text;           // JSON_STR: decoded UTF-8 (NUL-terminated); JSON_NUM: the literal
    size_t len;           // JSON_STR: byte length; JSON_ARR/OBJ: number of children
    struct Json *child;   // first element / member
    struct Json *next;    // next sibling
} Json;

// Parses text[0..len). Returns the root or NULL with err set ("line L col C: ...").
Json *json_parse(const char *text, size_t len, Err *err);
void json_free(Json *j);

// Member of an object by key, or NULL (also when j is not an object).
const Json *json_get(const Json *j, const char *key);
// Element i of an array, or NULL.
const Json *json_at(const Json *j, size_t i);
// The number as an exact integer: 0 on success, -1 if not a JSON integer in int64 range.
int json_int64(const Json *j, int64_t *out);
const char *json_type_name(JsonType t);

// ---- writer ----
typedef struct JsonBuf {
    char *s;              // NUL-terminated output
    size_t len, cap;
    int depth;
    unsigned char need_comma[64];
    int after_key;
} JsonBuf;

void jb_init(JsonBuf *b);
void jb_free(JsonBuf *b);
void jb_obj_begin(JsonBuf *b);
void jb_obj_end(JsonBuf *b);
void jb_arr_begin(JsonBuf *b);
void jb_arr_end(JsonBuf *b);
void jb_key(JsonBuf *b, const char *key);
void jb_str(JsonBuf *b, const char *s);
void jb_int(JsonBuf *b, int64_t v);
void jb_num(JsonBuf *b, double v);        // shortest text that reads back exactly; non-finite -> null
void jb_numf(JsonBuf *b, double v, int sig);   // v with `sig` significant digits
void jb_fixed(JsonBuf *b, double v, int decimals);   // v with `decimals` digits after the point
void jb_bool(JsonBuf *b, int v);
void jb_null(JsonBuf *b);
// Appends the members of obj (the text of a JSON object) to the object b
// is writing; -1, writing nothing, when obj is not a JSON object.
int jb_members(JsonBuf *b, const char *obj);
// Appends text that is already a JSON value as the next value, or white
// space (which takes no separator).
void jb_raw(JsonBuf *b, const char *json);

#endif
