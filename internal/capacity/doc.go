// Package capacity holds the rules that plan a fleet over time: when the
// forecast demand of a GPU model misses a service target, what to order
// and by when given the model's lead time, checked by replaying the
// forecast demand through the scheduler in the simulator (Procure); and
// what to do with each generation already in the fleet (Lifecycle).
//
// It is pure: history and fleet in, recommendation out; no clock, no
// store, no network. docs/CAPACITY.md describes the models and their
// limits.
package capacity
