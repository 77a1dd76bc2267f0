package nvidiasmi

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"

	"github.com/unicore/virtual-gpu-device-plugin/cmd/virtual-gpu-device-plugin/loadsock"
)

// ExitNotSupported: the requested operation is not available (nvidia-smi's
// return code 3), here --set-load without a load socket.
const ExitNotSupported = 3

// setLoadClear is the --set-load value that gives the GPUs back to the
// load model.
const setLoadClear = "clear"

var (
	// utilRE is --set-load's UTIL: a decimal number (0..100 is checked).
	utilRE = regexp.MustCompile(`^[0-9]{1,3}(\.[0-9]{1,6})?$`)
	// memRE is --set-load's MEM_MIB: a whole number of MiB.
	memRE = regexp.MustCompile(`^[0-9]{1,9}$`)
)

// parseSetLoad reads --set-load's value: UTIL[,MEM_MIB] or clear. It
// returns the message nvidia-smi prints for a value it does not take.
func parseSetLoad(v string) (loadsock.Request, string) {
	if v == setLoadClear {
		return loadsock.Request{Clear: true}, ""
	}
	bad := func(why string) (loadsock.Request, string) {
		return loadsock.Request{}, fmt.Sprintf("ERROR: --set-load=%q: %s: want UTIL[,MEM_MIB] (utilization 0-100 %%, memory used in MiB per GPU), e.g. 90 or 90,4096, or clear", trunc(v), why)
	}
	util, mem, hasMem := cutComma(v)
	if !utilRE.MatchString(util) {
		return bad("the utilization is not a number")
	}
	u, _ := strconv.ParseFloat(util, 64) // the pattern is a float
	if u > 100 {
		return bad("the utilization is above 100 %")
	}
	r := loadsock.Request{UtilizationPercent: &u}
	if hasMem {
		if !memRE.MatchString(mem) {
			return bad("the memory is not a whole number of MiB")
		}
		m, _ := strconv.Atoi(mem) // at most 9 digits
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
