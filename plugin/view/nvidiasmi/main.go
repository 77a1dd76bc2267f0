package nvidiasmi

import (
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
	"time"

	"github.com/unicore/virtual-gpu-device-plugin/plugin/view/loadsock"
)

// Exit codes, as the real nvidia-smi documents them (nvidia-smi(1), RETURN
// VALUE).
const (
	// ExitOK: success.
	ExitOK = 0
	// ExitInvalidArgument: a supplied argument or flag is invalid.
	ExitInvalidArgument = 2
	// ExitNotFound: a query to find an object was unsuccessful (no GPU, or
	// none matching -i).
	ExitNotFound = 6
	// ExitUnknownError: other error or internal driver error, here a GPU
	// whose handle cannot be obtained (unhealthy) or an unusable topology.
	ExitUnknownError = 255
)

// Messages the real nvidia-smi prints, on standard output.
const (
	msgNoDevices          = "No devices were found"
	msgInvalidCombination = "Invalid combination of input arguments. Please run 'nvidia-smi -h' for help."
	msgTopoID             = "The -i command line argument must be used in conjunction with -n or -p."
)

// msgNotRecognized is nvidia-smi's answer to an unknown option or argument.
func msgNotRecognized(opt string) string {
	return "ERROR: Option " + opt + " is not recognized. Please run 'nvidia-smi -h' for help."
}

// msgInvalidField is nvidia-smi's answer to an unknown --query-gpu field.
func msgInvalidField(name string) string {
	return `Field "` + name + `" is not a valid field to query.` + "\n"
}

// Command is one run of nvidia-smi with its environment. The zero value is
// not usable: Env, Stdout and Stderr must be set; a nil Now means time.Now.
// A Command holds no state between runs and may be run concurrently with
// another Command.
type Command struct {
	// Env returns an environment variable, "" if unset (os.Getenv).
	Env func(string) string
	// Stdout receives the output and, as with the real tool, the error
	// messages.
	Stdout io.Writer
	// Stderr receives a message when Stdout cannot be written.
	Stderr io.Writer
	// Now is the clock of the timestamps; nil means time.Now.
	Now func() time.Time
	// Hostname returns the host name, which Kubernetes sets to the pod's
	// name: the GPUs' holders of that pod are this container's processes.
	// nil means os.Hostname.
	Hostname func() (string, error)
	// Proc is the proc file system of the container's PID namespace, where
	// the main process's name is read (1/cmdline, 1/comm); nil means
	// os.DirFS("/proc").
	Proc fs.FS
}

// Main runs nvidia-smi with the arguments after the program name, reading
// the environment through env, and returns the exit code. It is the
// multi-call entry point: the plugin binary runs it when invoked as
// nvidia-smi. It reads only the environment and the status directory, and
// writes only to stdout and stderr (--set-load also talks to the plugin's
// load socket).
func Main(args []string, env func(string) string, stdout, stderr io.Writer) int {
	return (&Command{Env: env, Stdout: stdout, Stderr: stderr}).Run(args)
}

// options are the parsed command line.
type options struct {
	help, version, helpQueryGPU bool
	helpComputeApps             bool
	helpAccountedApps           bool
	list, query, xml            bool
	topo, topoMatrix, topoHelp  bool
	topoID                      bool
	mig, migListGI              bool // nvidia-smi mig, -lgi
	id, queryGPU, format        *string
	computeApps, accountedApps  *string
	setLoad                     *string
}

// csv reports whether the options ask for a CSV query.
func (o options) csv() bool {
	return o.queryGPU != nil || o.computeApps != nil || o.accountedApps != nil
}

// Run runs nvidia-smi with args (without the program name) and returns the
// exit code.
func (c *Command) Run(args []string) int {
	var out bytes.Buffer
	code := c.run(args, &out)
	if _, err := c.Stdout.Write(out.Bytes()); err != nil {
		fmt.Fprintf(c.Stderr, "nvidia-smi: write output: %v\n", err)
		return ExitUnknownError
	}
	return code
}

func (c *Command) run(args []string, out *bytes.Buffer) int {
	now := time.Now
	if c.Now != nil {
		now = c.Now
	}
	opts, msg := parseArgs(args)
	if msg != "" {
		out.WriteString(msg + "\n")
		return ExitInvalidArgument
	}
	switch {
	case opts.help:
		out.WriteString(helpText)
		return ExitOK
	case opts.version:
		writeVersion(out)
		return ExitOK
	case opts.helpQueryGPU:
		writeHelpQueryGPU(out)
		return ExitOK
	case opts.helpComputeApps || opts.helpAccountedApps:
		writeHelpApps(out, opts.helpAccountedApps)
		return ExitOK
	case opts.topoHelp || opts.topo && !opts.topoMatrix && !opts.topoID:
		out.WriteString(topoHelpText)
		return ExitOK
	case opts.topoID:
		out.WriteString(msgTopoID + "\n")
		return ExitInvalidArgument
	}
	if !validCombination(opts) {
		out.WriteString(msgInvalidCombination + "\n")
		return ExitInvalidArgument
	}
	var fs []*field
	var apps []*appField
	var noheader, nounits bool
	if opts.csv() {
		var bad string
		var ok bool
		if noheader, nounits, bad, ok = parseFormat(*opts.format); !ok {
			if bad == "" {
				out.WriteString(msgInvalidCombination + "\n")
			} else {
				out.WriteString(msgNotRecognized(bad) + "\n")
			}
			return ExitInvalidArgument
		}
		switch {
		case opts.queryGPU != nil:
			fs, bad, ok = parseFields(*opts.queryGPU)
		case opts.computeApps != nil:
			apps, bad, ok = parseAppFields(*opts.computeApps, computeAppFields)
		default:
			apps, bad, ok = parseAppFields(*opts.accountedApps, accountedAppFields)
		}
		if !ok {
			out.WriteString(msgInvalidField(bad) + "\n")
			return ExitInvalidArgument
		}
	}

	var load loadsock.Request
	if opts.setLoad != nil {
		var msg string
		if load, msg = parseSetLoad(*opts.setLoad); msg != "" {
			out.WriteString(msg + "\n")
			return ExitInvalidArgument
		}
	}

	m := readMachine(c.Env)
	if len(m.gpus) == 0 {
		out.WriteString(msgNoDevices + "\n")
		return ExitNotFound
	}
	if opts.topo {
		return writeTopology(out, m)
	}
	gpus := m.gpus
	if opts.id != nil {
		sels, ok := parseSelector(*opts.id)
		if ok {
			gpus, ok = selectGPUs(m.gpus, sels)
		}
		if !ok {
			out.WriteString(msgNoDevices + "\n")
			return ExitNotFound
		}
	}
	if opts.computeApps != nil || opts.query || !opts.list && !opts.csv() && opts.setLoad == nil && !opts.mig {
		readProcs(gpus, c.hostname(), func() string { return mainProcessName(c.proc()) })
	}
	q := &queryContext{now: now(), count: len(m.gpus)}
	switch {
	case opts.mig:
		return writeLGI(out, gpus)
	case opts.setLoad != nil:
		return c.writeSetLoad(out, load, gpus)
	case opts.list:
		return writeList(out, gpus)
	case opts.queryGPU != nil:
		return writeCSV(out, q, gpus, fs, noheader, nounits)
	case opts.computeApps != nil || opts.accountedApps != nil:
		return writeApps(out, q, gpus, apps, noheader, nounits, opts.accountedApps != nil)
	case opts.query && opts.xml:
		return writeXML(out, q, gpus)
	case opts.query:
		return writeQuery(out, q, gpus)
	}
	return writeSummary(out, q.now, gpus)
}

// parseArgs parses the command line. Value options take their value as the
// next argument or after "=" (-i 0, -i=0, --id 0, --id=0). It returns the
// message nvidia-smi prints for an argument it does not recognize, or for a
// value option without a value (an invalid combination).
func parseArgs(args []string) (options, string) {
	var o options
	if len(args) > 0 && args[0] == "mig" {
		o.mig = true
		for i := 1; i < len(args); i++ {
			a := args[i]
			name, value, hasValue := strings.Cut(a, "=")
			switch {
			case a == "-lgi" || a == "--list-gpu-instances":
				o.migListGI = true
			case name == "-i" || name == "--id":
				if !hasValue {
					if i+1 >= len(args) {
						return o, msgInvalidCombination
					}
					i++
					value = args[i]
				}
				o.id = &value
			default:
				return o, msgNotRecognized(a)
			}
		}
		if !o.migListGI {
			return o, msgInvalidCombination
		}
		return o, ""
	}
	if len(args) > 0 && args[0] == "topo" {
		o.topo = true
		for i := 1; i < len(args); i++ {
			switch a := args[i]; {
			case a == "-m" || a == "--matrix":
				o.topoMatrix = true
			case a == "-h" || a == "--help":
				o.topoHelp = true
			case a == "-i" || a == "--id":
				o.topoID = true
				i++ // its value
			case strings.HasPrefix(a, "-i=") || strings.HasPrefix(a, "--id="):
				o.topoID = true
			default:
				return o, msgNotRecognized(a)
			}
		}
		return o, ""
	}
	for i := 0; i < len(args); i++ {
		a := args[i]
		name, value, hasValue := strings.Cut(a, "=")
		var target **string
		switch name {
		case "-i", "--id":
			target = &o.id
		case "--query-gpu":
			target = &o.queryGPU
		case "--query-compute-apps":
			target = &o.computeApps
		case "--query-accounted-apps":
			target = &o.accountedApps
		case "--format":
			target = &o.format
		case "--set-load":
			target = &o.setLoad
		}
		if target != nil {
			if !hasValue {
				if i+1 >= len(args) {
					return o, msgInvalidCombination
				}
				i++
				value = args[i]
			}
			if value == "" {
				return o, msgInvalidCombination
			}
			*target = &value
			continue
		}
		switch a {
		case "-h", "--help":
			o.help = true
		case "--version":
			o.version = true
		case "--help-query-gpu":
			o.helpQueryGPU = true
		case "--help-query-compute-apps":
			o.helpComputeApps = true
		case "--help-query-accounted-apps":
			o.helpAccountedApps = true
		case "-L", "--list-gpus":
			o.list = true
		case "-q", "--query":
			o.query = true
		case "-x", "--xml-format":
			o.xml = true
		default:
			return o, msgNotRecognized(a)
		}
	}
	return o, ""
}

// validCombination reports whether the options make one command: -L, -q
// [-x], --query-gpu, --query-compute-apps or --query-accounted-apps with
// --format, --set-load, or the summary; -i with any of them.
func validCombination(o options) bool {
	switch {
	case o.csv() != (o.format != nil):
		return false
	case o.xml && !o.query:
		return false
	}
	n := 0
	for _, b := range []bool{o.list, o.query, o.queryGPU != nil, o.computeApps != nil, o.accountedApps != nil, o.setLoad != nil} {
		if b {
			n++
		}
	}
	return n <= 1
}

// parseFormat parses --format: csv, noheader and nounits separated by
// commas; csv is mandatory. It returns the unknown option, or "" with false
// when csv is missing.
func parseFormat(s string) (noheader, nounits bool, bad string, ok bool) {
	csv := false
	for opt := range strings.SplitSeq(s, ",") {
		switch strings.TrimSpace(opt) {
		case "csv":
			csv = true
		case "noheader":
			noheader = true
		case "nounits":
			nounits = true
		default:
			return false, false, strings.TrimSpace(opt), false
		}
	}
	return noheader, nounits, "", csv
}

// hostname is the host name, "" if it cannot be read.
func (c *Command) hostname() string {
	get := c.Hostname
	if get == nil {
		get = os.Hostname
	}
	h, err := get()
	if err != nil {
		return ""
	}
	return h
}

// proc is the proc file system.
func (c *Command) proc() fs.FS {
	if c.Proc != nil {
		return c.Proc
	}
	return os.DirFS("/proc")
}
