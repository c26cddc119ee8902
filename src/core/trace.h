// core/trace — a timeline of the brackets of core/prof (`tessera train
// --trace`): each bracket closed while a trace is attached to the thread
// and its current step is inside the trace's steps becomes one event (its
// kind, start and duration, its GEMM shape or the collective's group and
// bytes, the layer being worked on). No timer of its own: the event's times
// are the ones prof_end and prof_gemm took, so the events of a kind add up
// to --profile's row sums for the same steps.
//
// Context the brackets cannot know is set by their callers, cheaply (a
// thread-local store each): the model's stage names the layer it works on,
// the collectives name the operation, group and bytes of the wait they are
// about to close. A thread with no trace attached, or outside the steps,
// records nothing, and prof_begin stays a branch for it.
#ifndef TSR_CORE_TRACE_H
#define TSR_CORE_TRACE_H

#include <stddef.h>

#include "core/check.h"
#include "core/json.h"
#include "core/prof.h"

typedef struct Trace Trace;

// The events a trace holds at most by default; past its cap events are
// dropped and counted.
enum { TRACE_MAX_EVENTS = 100000 };

// A trace of steps [first, last] holding at most cap events (0:
// TRACE_MAX_EVENTS) whose times are counted from origin (a timer_now()
// value every rank agrees on). NULL with err when out of memory.
Trace *trace_create(int first, int last, size_t cap, double origin, Err *err);
void trace_free(Trace *t);
// Attaches t to the calling thread (NULL detaches); it records once
// trace_step names a step inside its range.
void trace_attach(Trace *t);
// The step the calling thread's work belongs to from now (0: none).
void trace_step(int step);
// Whether the calling thread records events now.
int trace_on(void);
// The layer the calling thread's next brackets work on (-1: none, e.g. the
// embeddings and the head).
void trace_layer(int layer);
// The collective the calling thread's next bracket waits on: its operation
// ("allreduce", "recv", ...), its communicator's name ("tp", "pp_act", ...)
// and the bytes it moves. Used by that bracket only.
void trace_comm(const char *op, const char *group, double bytes);
// One event: a bracket of kind from t0 to t1 (timer_now seconds), with its
// GEMM shape (0 for other kinds), flops and bytes. Called by core/prof.
void trace_record(double t0, double t1, ProfKind kind, int m, int n, int k, double flops, double bytes);
// One event on the steps' own row: step from t0 to t1.
void trace_span(double t0, double t1, int step);
// The events held, those dropped past the cap, and the cap.
size_t trace_count(const Trace *t);
size_t trace_cap(const Trace *t);
size_t trace_dropped(const Trace *t);
// Appends t's events as Chrome trace-event objects, "X" complete events
// with ts and dur in microseconds from the origin, to the JSON array b is
// writing; pid is the process's (the rank), and its name and threads' names
// come first as "M" metadata events.
void trace_json(const Trace *t, int pid, const char *process_name, JsonBuf *b);

#endif
