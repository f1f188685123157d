// Command nvmldump prints what the NVML backend reads on this machine
// (devices, versions, one sample of every GPU) as JSON, for gpu-check:
//
//	go run ./internal/gpu/nvml/nvmldump [-interval 1s]
//
// It exits 2 when NVML is unavailable (no driver, or a build without cgo).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"time"

	"github.com/gpufleet/gpufleet/internal/gpu"
	"github.com/gpufleet/gpufleet/internal/gpu/nvml"
)

func main() {
	interval := flag.Duration("interval", time.Second, "time between the two samples GPM needs (0: one sample)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))
	err := nvml.Dump(ctx, os.Stdout, *interval, nvml.WithLogger(logger))
	switch {
	case errors.Is(err, gpu.ErrUnavailable):
		fmt.Fprintln(os.Stderr, "nvmldump:", err)
		os.Exit(2)
	case err != nil:
		fmt.Fprintln(os.Stderr, "nvmldump:", err)
		os.Exit(1)
	}
}
