package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/rs/zerolog"

	"github.com/unicore/virtual-gpu-device-plugin/plugin"
)

// newLogger builds the root logger from the validated config.
func newLogger(cfg config, w io.Writer) zerolog.Logger {
	level, _ := zerolog.ParseLevel(cfg.logLevel) // validated
	if cfg.logFormat == "console" {
		w = zerolog.ConsoleWriter{Out: w, TimeFormat: time.RFC3339}
	}
	return zerolog.New(w).Level(level).With().Timestamp().Logger()
}

// serve runs the device plugin until ctx ends.
func serve(ctx context.Context, cfg config, logw io.Writer) error {
	log := newLogger(cfg, logw)
	devices := make([]plugin.Device, cfg.devices)
	for i := range devices {
		devices[i] = plugin.Device{ID: fmt.Sprintf("fake-%d", i), Index: i, NUMA: -1, Healthy: true}
	}
	srv, err := plugin.NewServer(plugin.ServerConfig{Devices: devices, Logger: log})
	if err != nil {
		return err
	}
	runner, err := plugin.NewRunner(plugin.RunnerConfig{
		Dir:          cfg.devicePluginPath,
		SocketName:   cfg.socketName,
		ResourceName: cfg.resourceName,
		Server:       srv,
		Logger:       log,
	})
	if err != nil {
		return err
	}
	host, _ := os.Hostname()
	log.Info().Str("version", version).Str("node", host).Int("devices", cfg.devices).
		Str("resource", cfg.resourceName).Str("dir", cfg.devicePluginPath).Msg("starting")
	return runner.Run(ctx)
}
