package nvidiasmi

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/unicore/virtual-gpu-device-plugin/plugin/view/loadsock"
)

// ExitNotSupported: the requested operation is not available (nvidia-smi's
// return code 3), here --set-load without a load socket.
const ExitNotSupported = 3

// setLoadClear is the --set-load value that gives the GPUs back to the
// load model.
const setLoadClear = "clear"

// parseSetLoad reads --set-load's value: UTIL[,MEM_MIB] or clear, with the
// load protocol's grammar (loadsock.ParseUtilization, ParseMemoryMiB), so
// that what the command takes the plugin takes too. It returns the message
// nvidia-smi prints for a value it does not take.
func parseSetLoad(v string) (loadsock.Request, string) {
	if v == setLoadClear {
		return loadsock.Request{Clear: true}, ""
	}
	bad := func(err error) (loadsock.Request, string) {
		why := err.Error()
		var r *loadsock.Refusal
		if errors.As(err, &r) {
			why = r.Msg
		}
		return loadsock.Request{}, fmt.Sprintf("ERROR: --set-load=%q: %s: want UTIL[,MEM_MIB] (utilization 0-100 %%, memory used in MiB per GPU), e.g. 90 or 90,4096, or clear", trunc(v), why)
	}
	util, mem, hasMem := cutComma(v)
	u, err := loadsock.ParseUtilization(util)
	if err != nil {
		return bad(err)
	}
	r := loadsock.Request{UtilizationPercent: &u}
	if hasMem {
		m, err := loadsock.ParseMemoryMiB(mem)
		if err != nil {
			return bad(err)
		}
		r.MemoryUsedMiB = &m
	}
	return r, ""
}

// cutComma splits v at its first comma.
func cutComma(v string) (before, after string, found bool) {
	for i := range len(v) {
		if v[i] == ',' {
			return v[:i], v[i+1:], true
		}
	}
	return v, "", false
}

// trunc shortens a value quoted in a message.
func trunc(s string) string {
	if len(s) > 40 {
		return s[:40] + "…"
	}
	return s
}

// writeSetLoad sends req for gpus over the container's load socket and
// writes the outcome, as the real tool writes that of a setting: a line per
// GPU, then "All done.".
func (c *Command) writeSetLoad(out *bytes.Buffer, req loadsock.Request, gpus []*gpu) int {
	path := c.Env(loadsock.EnvSocket)
	if path == "" {
		out.WriteString("ERROR: --set-load needs the device plugin's load socket, and $" + loadsock.EnvSocket +
			" is not set: the plugin does not let containers set their load (-telemetry-writable).\n")
		return ExitNotSupported
	}
	for _, g := range gpus {
		req.GPUs = append(req.GPUs, g.id)
	}
	if _, err := loadsock.Send(context.Background(), path, req); err != nil {
		var r *loadsock.Refusal
		if !errors.As(err, &r) {
			fmt.Fprintf(out, "ERROR: the device plugin's load socket %s cannot be reached: %v\n", path, err)
			return ExitUnknownError
		}
		fmt.Fprintf(out, "ERROR: the device plugin refused the load: %s\n", r.Msg)
		switch r.Cause {
		case loadsock.CauseValue, loadsock.CauseSyntax, loadsock.CauseTooLong, loadsock.CauseGPU:
			return ExitInvalidArgument
		case loadsock.CauseOff:
			return ExitNotSupported
		}
		return ExitUnknownError
	}
	for _, g := range gpus {
		name := g.id
		if g.st != nil {
			name = g.st.PCIBusID
		}
		switch {
		case req.Clear:
			fmt.Fprintf(out, "Load of GPU %s is the load model's again.\n", name)
		case req.MemoryUsedMiB != nil && req.UtilizationPercent != nil:
			fmt.Fprintf(out, "Load of GPU %s was set to %s %% utilization and %d MiB memory used.\n", name, percent(*req.UtilizationPercent), *req.MemoryUsedMiB)
		case req.UtilizationPercent != nil:
			fmt.Fprintf(out, "Load of GPU %s was set to %s %% utilization.\n", name, percent(*req.UtilizationPercent))
		}
	}
	out.WriteString("All done.\n")
	return ExitOK
}

// percent prints a utilization without needless decimals.
func percent(u float64) string { return strconv.FormatFloat(u, 'f', -1, 64) }
