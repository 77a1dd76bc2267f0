// Package options is the configuration of the serve command: its flags,
// their VGPU_* environment twins, a configuration file or a directory of
// per-node profiles, merged by precedence into one typed Config that is
// validated whole before anything starts. It is to the plugin what
// cmd/kubelet/app/options is to the kubelet: main parses with it and wires
// what it returns; nothing here starts anything or exits.
//
// # Precedence
//
// Every value comes from, in order of strength: the command line, the
// flag's environment variable (-devices is VGPU_DEVICES; -node-name also
// reads NODE_NAME), the -config file or the node's profile, the default. A
// flag given on the command line, or a variable set in the DaemonSet, so
// overrides every profile. Settings is the merged, unchecked result and
// remembers where each value came from; Settings.Validate turns it into a
// Config whose values are typed (log level, machine, fault plan, NUMA
// report mode, policies, sharing), so nothing parses them again.
//
// # Use
//
//	o, err := options.Parse(args, os.Getenv) // no file read yet
//	cfg, profiles, err := o.Load()          // reads -config, validates every profile
//	…
//	f, err := o.Select(profiles, label)     // the node's label changed
//	cfg, err = o.Resolve(f)                 // a Config, or an error; never exits
//	profiles, err = options.LoadProfiles(o.ConfigPath) // the mounted ConfigMap changed
//
// Every error wraps ErrInvalid and is one line naming the flag, the
// variable, or the file, field and line, and the rule; the command exits
// with status 2 for it at start.
//
// # The file
//
// The format is that of NVIDIA's device plugin configuration (its
// api/config/v1), version v1, read strictly: an unknown or misspelled field,
// a value of the wrong type, a second document or a YAML alias is an error
// naming the field and the line. As NVIDIA's plugin reads them, a file
// without a version is v1 (noted in Config.Ignored), an empty file is the
// empty configuration, and a field with no value (null) is not set. deploy/config/example.yaml shows every
// field and deploy/config/config.schema.json is its JSON Schema, generated
// from the types the parser reads (Schema).
//
//	version: v1
//	flags:          # every serve flag, camelCase: devices, topology, resourceName, …
//	  topology: dgx-a100
//	sharing:
//	  timeSlicing:
//	    renameByDefault: false
//	    failRequestsGreaterThanOne: false
//	    resources:
//	    - name: unicore.mcyou.cc/gpu
//	      replicas: 4
//
// A file may set every serve flag but those that choose the file and the
// node: -config, -config-default, -node-name, -kubeconfig, -label-node (and
// -version). A relative topology path is taken relative to the file's
// directory, so a ConfigMap can carry a topology file next to the profiles.
//
// # Profiles
//
// -config may name a directory, as a mounted ConfigMap: each <name>.yaml in
// it is a profile (<name>.yml, and <name> without a suffix as NVIDIA's
// ConfigMaps name their keys, too), <name> a valid label value. The node label
// unicore.mcyou.cc/device-plugin.config=<name> (ProfileLabel) picks one, as
// nvidia.com/device-plugin.config does for NVIDIA's plugin; -config-default
// applies to a node without the label; without either, no profile applies.
// Entries starting with a dot (..data, ..<timestamp>) are skipped, symbolic
// links are followed, only regular files are read, and files of kind
// Topology or of nvidia-smi topo -m output are topology files, not profiles. Every profile is checked at
// start. A profile holds the machine's shape and behaviour (devices,
// topology, resourceName, allocationPolicy, sharedDevicesAllocationPolicy,
// deviceListStrategy, replicas, numaReport, faults, nvidiaSmi,
// visibleDevicesEnv, deviceNodes, telemetryModel, telemetrySeed,
// telemetryPerPod, telemetryWritable, sharing) and is refused if it sets a
// path or address (state, sockets, directories, the device node source,
// metrics, telemetry) or a setting of the whole process (logging, history,
// intervals). telemetryWritable needs -telemetry-address, so a profile that
// sets it does not resolve without it.
//
// # Sharing and NVIDIA's fields
//
// sharing.timeSlicing is read as NVIDIA's plugin reads it: replicas ≥ 2,
// renameByDefault advertises <resource>.shared, a resource's rename names
// the shared resource (a bare name takes the resource's domain), devices is
// all or a list of GPU indices or ids. The one resource listed must be the
// plugin's -resource-name (a bare name takes its domain, as NVIDIA reads
// gpu as nvidia.com/gpu); entries of MIG resources are noted and ignored. -replicas (VGPU_REPLICAS) overrides the count;
// -replicas=1 turns sharing off. sharing.mps is refused. Of NVIDIA's other
// fields, flags.plugin.sharedDevicesAllocationPolicy and
// flags.plugin.deviceListStrategy are the flags
// -shared-devices-allocation-policy and -device-list-strategy; the rest
// (migStrategy, failOnInitError, the driver and device roots, gfd,
// resources, imex …) are accepted and listed in Config.Ignored, for the
// caller to log once.
package options
