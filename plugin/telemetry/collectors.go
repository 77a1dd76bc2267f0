package telemetry

import (
	"bytes"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
)

// Collector is one line of a dcgm-exporter collectors file (its -f,
// --collectors): a DCGM field, the Prometheus type it is served as, and its
// help text.
type Collector struct {
	Field, Type, Help string
}

// driverVersionLabel is the one label field the exporter serves: with it
// in the collectors, every sample carries DCGM_FI_DRIVER_VERSION.
const driverVersionLabel = "DCGM_FI_DRIVER_VERSION"

// promTypes are the types dcgm-exporter accepts in a collectors file.
var promTypes = map[string]bool{"gauge": true, "counter": true, "histogram": true, "summary": true, "label": true}

// MaxCollectorsBytes bounds a collectors file.
const MaxCollectorsBytes = 1 << 20

// DefaultCollectors returns dcgm-exporter 4.5.3-4.8.2's default counters
// (etc/default-counters.csv): every field the exporter serves, with that
// file's types and help, and the DCGM_FI_DRIVER_VERSION label.
func DefaultCollectors() []Collector {
	out := make([]Collector, 0, len(families)+1)
	for i := range families {
		f := &families[i]
		out = append(out, Collector{Field: f.name, Type: f.defType, Help: f.defHelp})
	}
	return append(out, Collector{Field: driverVersionLabel, Type: "label", Help: "Driver Version"})
}

// ParseCollectors reads a collectors file in dcgm-exporter's format: CSV
// lines "DCGM field, Prometheus type, help", '#' starting a comment, spaces
// around the values trimmed. It returns the collectors the exporter serves,
// in the file's order, and a warning for each line it leaves out: a DCGM
// field (DCGM_FI_*, DCGM_EXP_*) or label this fake does not simulate.
// Errors wrap ErrInvalidConfig and name the line: a line without exactly 3
// values, a type other than gauge, counter, histogram, summary or label, a
// name that is no DCGM field, a field listed twice, a file over
// MaxCollectorsBytes or with no field at all.
func ParseCollectors(r io.Reader) ([]Collector, []string, error) {
	data, err := io.ReadAll(io.LimitReader(r, MaxCollectorsBytes+1))
	if err != nil {
		return nil, nil, fmt.Errorf("read collectors: %w", err)
	}
	if len(data) > MaxCollectorsBytes {
		return nil, nil, fmt.Errorf("collectors: more than %d bytes: %w", MaxCollectorsBytes, ErrInvalidConfig)
	}
	cr := csv.NewReader(bytes.NewReader(data))
	cr.Comment = '#'
	cr.FieldsPerRecord = -1
	var out []Collector
	var warnings []string
	seen := map[string]int{}
	for {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil { // FieldPos is only for a record read
			line := 0
			var pe *csv.ParseError
			if errors.As(err, &pe) {
				line, err = pe.Line, pe.Err
			}
			return nil, nil, fmt.Errorf("collectors line %d: %w: %w", line, err, ErrInvalidConfig)
		}
		line, _ := cr.FieldPos(0)
		for i := range rec {
			rec[i] = strings.TrimSpace(rec[i])
		}
		if len(rec) != 3 {
			return nil, nil, fmt.Errorf("collectors line %d: %q: want 3 values (DCGM field, type, help), got %d: %w",
				line, strings.Join(rec, ","), len(rec), ErrInvalidConfig)
		}
		c := Collector{Field: rec[0], Type: rec[1], Help: rec[2]}
		switch {
		case !strings.HasPrefix(c.Field, "DCGM_FI_") && !strings.HasPrefix(c.Field, "DCGM_EXP_"):
			return nil, nil, fmt.Errorf("collectors line %d: %q is not a DCGM field (DCGM_FI_…): %w", line, c.Field, ErrInvalidConfig)
		case !promTypes[c.Type]:
			return nil, nil, fmt.Errorf("collectors line %d: %s: type %q: want gauge, counter, histogram, summary or label: %w",
				line, c.Field, c.Type, ErrInvalidConfig)
		case seen[c.Field] != 0:
			return nil, nil, fmt.Errorf("collectors line %d: %s is listed on line %d already: %w", line, c.Field, seen[c.Field], ErrInvalidConfig)
		case strings.ContainsAny(c.Help, "\n\\"):
			return nil, nil, fmt.Errorf("collectors line %d: %s: help with a newline or backslash: %w", line, c.Field, ErrInvalidConfig)
		}
		seen[c.Field] = line
		if c.Type == "label" {
			if c.Field != driverVersionLabel {
				warnings = append(warnings, fmt.Sprintf("collectors line %d: label %s is not simulated: left out", line, c.Field))
				continue
			}
		} else if familyOf(c.Field) == nil {
			warnings = append(warnings, fmt.Sprintf("collectors line %d: %s is not simulated: left out", line, c.Field))
			continue
		}
		out = append(out, c)
	}
	if len(out) == 0 {
		return nil, warnings, fmt.Errorf("collectors: no field this fake serves (served: %s): %w", strings.Join(servedNames(), ", "), ErrInvalidConfig)
	}
	return out, warnings, nil
}

// familyOf returns the family of a DCGM field name, nil if not served.
func familyOf(name string) *family {
	for i := range families {
		if families[i].name == name {
			return &families[i]
		}
	}
	return nil
}

// servedNames are the names of the fields served.
func servedNames() []string {
	out := make([]string, len(families))
	for i := range families {
		out[i] = families[i].name
	}
	return out
}

// serve returns the families the collectors choose, in field id order,
// with their types and help, and whether they include the driver version
// label. A collector of a field not served, or listed twice, is an error.
func serve(cs []Collector) ([]servedFamily, bool, error) {
	var out []servedFamily
	driver := false
	for _, c := range cs {
		if c.Type == "label" && c.Field == driverVersionLabel {
			driver = true
			continue
		}
		f := familyOf(c.Field)
		switch {
		case f == nil || c.Type == "label":
			return nil, false, fmt.Errorf("collector %s (%s): not served (served: %s): %w", c.Field, c.Type, strings.Join(servedNames(), ", "), ErrInvalidConfig)
		case !promTypes[c.Type]:
			return nil, false, fmt.Errorf("collector %s: type %q: %w", c.Field, c.Type, ErrInvalidConfig)
		case slices.ContainsFunc(out, func(s servedFamily) bool { return s.family == f }):
			return nil, false, fmt.Errorf("collector %s listed twice: %w", c.Field, ErrInvalidConfig)
		}
		out = append(out, servedFamily{family: f, typ: c.Type, help: c.Help})
	}
	slices.SortFunc(out, func(a, b servedFamily) int { return a.id - b.id })
	return out, driver, nil
}
