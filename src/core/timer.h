// core/timer — monotonic wall clock.
#ifndef TSR_CORE_TIMER_H
#define TSR_CORE_TIMER_H

// Seconds since an arbitrary fixed point (CLOCK_MONOTONIC); never goes back.
double timer_now(void);

#endif
