package mig

import (
	"fmt"
	"strconv"
	"strings"
)

// ProfileName is a MIG profile name taken apart as mig-parted reads it:
// "[<c>c.]<g>g.<gb>gb[+attr,…|-attr,…]". "1g.10gb+me" has C = G = 1,
// GB = 10 and the attribute "me"; "1c.3g.40gb" is a compute-instance
// profile (C 1 of a 3g GPU instance).
type ProfileName struct {
	// C is the compute slices of the compute instance; C == G without a
	// "<c>c." prefix.
	C int
	// G is the compute slices of the GPU instance.
	G int
	// GB is the memory in GB as the name rounds it.
	GB int
	// Attributes are the attributes after "+" ("me", "me.all", "gfx").
	Attributes []string
	// NegAttributes are the attributes after "-" ("me" of "1g.24gb-me").
	NegAttributes []string
}

// ParseProfileName parses a MIG profile name with the rules of NVIDIA's
// mig-parted (go-nvlib's parseMigProfile): 2 or 3 dot-separated fields
// ending in c, g and gb, decimal numbers, and an optional list of unique
// attributes after one "+" or one "-" (not both), each alphanumeric with
// inner dots and not starting with a digit. It does not say whether any
// product has the profile: see Product.Profile.
func ParseProfileName(s string) (ProfileName, error) {
	if s == "" {
		return ProfileName{}, fmt.Errorf("empty profile name")
	}
	plus := strings.SplitN(s, "+", 2)
	minus := strings.SplitN(s, "-", 2)
	if len(plus) == 2 && len(minus) == 2 {
		return ProfileName{}, fmt.Errorf("profile %q has both '+' and '-' attributes", s)
	}
	parts, neg := plus, false
	if len(plus) == 1 {
		parts, neg = minus, len(minus) == 2
	}
	var n ProfileName
	fields := strings.Split(parts[0], ".")
	var err error
	switch len(fields) {
	case 3:
		if n.C, err = profileField(fields[0], "c"); err != nil {
			return ProfileName{}, fmt.Errorf("profile %q: %w", s, err)
		}
		fields = fields[1:]
	case 2:
	default:
		return ProfileName{}, fmt.Errorf("profile %q: want <g>g.<gb>gb or <c>c.<g>g.<gb>gb", s)
	}
	if n.G, err = profileField(fields[0], "g"); err != nil {
		return ProfileName{}, fmt.Errorf("profile %q: %w", s, err)
	}
	if n.GB, err = profileField(fields[1], "gb"); err != nil {
		return ProfileName{}, fmt.Errorf("profile %q: %w", s, err)
	}
	if n.C == 0 {
		n.C = n.G
	}
	if n.C > n.G {
		return ProfileName{}, fmt.Errorf("profile %q: %d compute slices of a %dg instance", s, n.C, n.G)
	}
	if len(parts) == 1 {
		return n, nil
	}
	attrs, err := profileAttributes(parts[1])
	if err != nil {
		return ProfileName{}, fmt.Errorf("profile %q: %w", s, err)
	}
	if neg {
		n.NegAttributes = attrs
	} else {
		n.Attributes = attrs
	}
	return n, nil
}

// profileField parses "<n><suffix>" with n a positive decimal number.
func profileField(s, suffix string) (int, error) {
	num, ok := strings.CutSuffix(s, suffix)
	if !ok {
		return 0, fmt.Errorf("field %q does not end in %q", s, suffix)
	}
	if num == "" || strings.TrimLeft(num, "0123456789") != "" {
		return 0, fmt.Errorf("field %q: want a number before %q", s, suffix)
	}
	v, err := strconv.Atoi(num)
	if err != nil || v <= 0 || v > 1<<20 {
		return 0, fmt.Errorf("field %q: want a positive number before %q", s, suffix)
	}
	return v, nil
}

// profileAttributes parses a comma-separated attribute list.
func profileAttributes(s string) ([]string, error) {
	attrs := strings.Split(s, ",")
	seen := map[string]bool{}
	for _, a := range attrs {
		switch {
		case a == "":
			return nil, fmt.Errorf("empty attribute")
		case seen[a]:
			return nil, fmt.Errorf("attribute %q repeated", a)
		case a[0] >= '0' && a[0] <= '9':
			return nil, fmt.Errorf("attribute %q begins with a digit", a)
		case a[0] == '.' || a[len(a)-1] == '.':
			return nil, fmt.Errorf("attribute %q begins or ends with a dot", a)
		}
		for _, r := range a {
			if (r < 'a' || r > 'z') && (r < 'A' || r > 'Z') && (r < '0' || r > '9') && r != '.' {
				return nil, fmt.Errorf("attribute %q: only letters, digits and dots", a)
			}
		}
		seen[a] = true
	}
	return attrs, nil
}

// String formats n as NVIDIA names profiles: "1g.10gb+me", "1c.3g.40gb".
func (n ProfileName) String() string {
	s := fmt.Sprintf("%dg.%dgb", n.G, n.GB)
	if n.C != n.G {
		s = fmt.Sprintf("%dc.%s", n.C, s)
	}
	if len(n.Attributes) > 0 {
		s += "+" + strings.Join(n.Attributes, ",")
	}
	if len(n.NegAttributes) > 0 {
		s += "-" + strings.Join(n.NegAttributes, ",")
	}
	return s
}
