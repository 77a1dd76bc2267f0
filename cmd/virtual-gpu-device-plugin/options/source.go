package options

import (
	"github.com/unicore/virtual-gpu-device-plugin/plugin/agent"
	"github.com/unicore/virtual-gpu-device-plugin/plugin/kube"
	"github.com/unicore/virtual-gpu-device-plugin/store"
)

// ProfileSource is the agent's source of configurations (agent.Source): the
// command line and the environment over the -config file, or over the
// profile of a -config directory that a node's label selects. Build it
// with NewProfileSource; the agent calls it one method at a time.
type ProfileSource struct {
	o        *Options
	start    *Config
	profiles *Profiles
}

var _ agent.Source = (*ProfileSource)(nil)

// NewProfileSource returns the ProfileSource of o: start and profiles are what o.Load
// returned (profiles nil when -config is not a directory).
func NewProfileSource(o *Options, start *Config, profiles *Profiles) *ProfileSource {
	return &ProfileSource{o: o, start: start, profiles: profiles}
}

// Fallback is start's configuration: the -config-default profile, the
// -config file, or flags only.
func (s *ProfileSource) Fallback() agent.Choice {
	why, detail := store.WhyFlags, ""
	switch {
	case s.start.Profile != "":
		why, detail = store.WhyDefault, "-config-default="+s.start.Profile
	case s.start.File != "":
		detail = "-config " + s.start.File
	}
	return s.start.Choice(why, detail)
}

// Profiles reports whether -config is a directory of profiles.
func (s *ProfileSource) Profiles() bool { return s.profiles != nil }

// Select resolves the profile the profile label's value selects ("" for
// no label: the -config-default profile, or flags only), with the MIG
// layout the MIG layout label names, if any, in place of -mig-config
// (stronger than the command line, as GPU Operator's label is), and why.
// A layout that does not resolve is an error naming the label.
func (s *ProfileSource) Select(sel agent.Selection) (agent.Choice, error) {
	label := sel.Profile
	f, err := s.o.Select(s.profiles, label)
	if err != nil {
		return agent.Choice{}, err
	}
	var why, detail string
	switch {
	case label != "":
		why, detail = store.WhyNodeLabel, kube.ConfigLabel+"="+label
	case f != nil:
		why, detail = store.WhyDefault, "-config-default="+f.Profile+" (no "+kube.ConfigLabel+" label)"
	default:
		why, detail = store.WhyFlags, "no "+kube.ConfigLabel+" label and no -config-default"
	}
	st, err := s.o.Settings(f)
	if err != nil {
		return agent.Choice{}, err
	}
	if sel.MIGConfig != "" {
		st.migConfigFromLabel(kube.MIGConfigLabel, sel.MIGConfig)
		if label == "" {
			why, detail = store.WhyNodeLabel, kube.MIGConfigLabel+"="+sel.MIGConfig+"; "+detail
		} else {
			detail += "; " + kube.MIGConfigLabel + "=" + sel.MIGConfig
		}
	}
	cfg, err := st.Validate()
	if err != nil {
		return agent.Choice{}, err
	}
	return cfg.Choice(why, detail), nil
}

// Reload reads the profiles directory again; every profile must resolve,
// as at start. On an error the profiles in force stay.
func (s *ProfileSource) Reload() error {
	ps, err := LoadProfiles(s.o.ConfigPath)
	if err == nil {
		_, err = s.o.ResolveAll(ps)
	}
	if err != nil {
		return err
	}
	s.profiles = ps
	return nil
}

// Dir is -config.
func (s *ProfileSource) Dir() string { return s.o.ConfigPath }

// Choice returns c as the agent's choice, why and detail saying what chose
// it, with what to log about it.
func (c *Config) Choice(why, detail string) agent.Choice {
	n := agent.Notes{File: c.File, Overridden: c.Overridden, Warnings: c.Warnings}
	for _, x := range c.Ignored {
		n.Ignored = append(n.Ignored, x.String())
	}
	return agent.Choice{Config: c.Config, Why: why, Detail: detail, Notes: n}
}
