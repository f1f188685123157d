// Package forecast predicts daily GPU demand (docs/CAPACITY.md): additive
// Holt-Winters with a damped trend and a weekly season, its parameters
// chosen by one-step error on the history, with 80% and 95% prediction
// intervals; the seasonal-naive baseline a practitioner would use; and a
// rolling-origin backtest that scores both on the same history. It is
// pure: a series in, a forecast out.
package forecast
