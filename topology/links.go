package topology

import (
	"fmt"
	"math/bits"
	"slices"
	"strconv"
	"strings"
)

// MaxLinksBytes is the longest VIRTUAL_GPU_LINKS value ParseLinks accepts:
// 128 KiB, Linux's limit for one environment string (MAX_ARG_STRLEN), so no
// container can have a longer one. The plugin's values are far shorter: the
// 1024 GPUs of the generic layout take under 5 KiB.
const MaxLinksBytes = 128 << 10

// A rank orders link labels by closeness: SYS 0 < NODE < PHB < PXB < PIX <
// BOARD 5 < NV1 6 < … < NV18 23. The PCIe ranks are the PCIe values.
type rank = uint8

const numRanks = int(BOARD) + 1 + MaxNVLinks

// rankOf returns the rank of the label nvidia-smi prints for l.
func rankOf(l Link) rank {
	if l.NVLinks > 0 {
		return rank(int(BOARD) + l.NVLinks)
	}
	return rank(l.PCIe)
}

// rankLabel returns the label of r: "SYS" … "BOARD", "NV1" … "NV18".
func rankLabel(r rank) string {
	if r <= rank(BOARD) {
		return PCIe(r).String()
	}
	return "NV" + strconv.Itoa(int(r)-int(BOARD))
}

// parseRank parses a label as encodeLinks writes it (no aliases).
func parseRank(s string) (rank, bool) {
	if d, ok := strings.CutPrefix(s, "NV"); ok {
		n, ok := parseNumber(d)
		if !ok || n < 1 || n > MaxNVLinks {
			return 0, false
		}
		return rank(int(BOARD) + n), true
	}
	for r := SYS; r <= BOARD; r++ {
		if s == r.String() {
			return rank(r), true
		}
	}
	return 0, false
}

// parseNumber parses a canonical decimal number: digits only, no sign, no
// leading zero, at most 7 digits.
func parseNumber(s string) (int, bool) {
	if s == "" || len(s) > 7 || len(s) > 1 && s[0] == '0' {
		return 0, false
	}
	n := 0
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
		n = n*10 + int(s[i]-'0')
	}
	return n, true
}

// linksValue returns the EnvLinks value for the GPUs idx (sorted, distinct,
// in range): position p is idx[p].
func (m *Machine) linksValue(idx []int) string {
	return encodeLinks(len(idx), func(p, q int) rank { return rankOf(m.Link(idx[p], idx[q])) })
}

// encodeLinks writes the compact form of the labels of every pair of k
// positions (see EnvLinks). rankOf is called once per pair p < q.
//
// The first entry is the lowest rank present. Then, for each higher rank L
// present, in ascending order, the pairs of exactly rank L are covered by
// groups, each a clique of the graph G_L of pairs of rank ≥ L: a clique
// may contain pairs of a higher rank, which a later entry overrides, but no
// pair of a lower one. A connected component of G_L that is a clique is one
// group (a PCIe switch, host bridge or NUMA node, an NVSwitch domain);
// within other components (hybrid cube meshes, rings) a greedy cover grows
// a clique from each pair not yet covered, adding the lowest common
// neighbour while there is one.
func encodeLinks(k int, rankOf func(p, q int) rank) string {
	if k < 2 {
		return ""
	}
	r := make([]rank, k*k)
	var present [numRanks]bool
	for p := range k {
		for q := p + 1; q < k; q++ {
			v := rankOf(p, q)
			r[p*k+q], r[q*k+p] = v, v
			present[v] = true
		}
	}
	def := rank(slices.Index(present[:], true))
	var b strings.Builder
	b.WriteString(rankLabel(def))
	c := newCover(k, r)
	for L := def + 1; int(L) < numRanks; L++ {
		if !present[L] {
			continue
		}
		b.WriteByte(';')
		b.WriteString(rankLabel(L))
		b.WriteByte('=')
		c.level(L, func(group []int, first bool) {
			if !first {
				b.WriteByte(',')
			}
			writeGroup(&b, group)
		})
	}
	return b.String()
}

// cover finds the groups of one rank for encodeLinks. Rows of bitsets are
// words uint64s long.
type cover struct {
	k, words int
	r        []rank
	adj      []uint64 // row p: the q with r[p][q] >= L
	covered  []uint64 // row p: the q whose pair with p is in a group
	seen     []uint64 // one row: visited positions
}

func newCover(k int, r []rank) *cover {
	w := (k + 63) / 64
	return &cover{k: k, words: w, r: r, adj: make([]uint64, k*w), covered: make([]uint64, k*w), seen: make([]uint64, w)}
}

func (c *cover) row(set []uint64, p int) []uint64 { return set[p*c.words : (p+1)*c.words] }

// level emits, through emit, the groups that cover every pair of rank L.
func (c *cover) level(L rank, emit func(group []int, first bool)) {
	k, r := c.k, c.r
	clear(c.adj)
	clear(c.covered)
	clear(c.seen)
	for p := range k {
		for q := p + 1; q < k; q++ {
			if r[p*k+q] >= L {
				c.adj[p*c.words+q/64] |= 1 << (q % 64)
				c.adj[q*c.words+p/64] |= 1 << (p % 64)
			}
		}
	}
	first := true
	out := func(g []int) {
		emit(g, first)
		first = false
	}
	var comp, queue []int
	for s := range k {
		if c.seen[s/64]&(1<<(s%64)) != 0 || !anyBit(c.row(c.adj, s)) {
			continue
		}
		// The component of s, by breadth-first search.
		comp, queue = comp[:0], append(queue[:0], s)
		c.seen[s/64] |= 1 << (s % 64)
		for len(queue) > 0 {
			p := queue[0]
			queue = queue[1:]
			comp = append(comp, p)
			for w, x := range c.row(c.adj, p) {
				x &^= c.seen[w]
				c.seen[w] |= x
				for ; x != 0; x &= x - 1 {
					queue = append(queue, w*64+bits.TrailingZeros64(x))
				}
			}
		}
		slices.Sort(comp)
		exact, edges := false, 0
		for _, p := range comp {
			for _, x := range c.row(c.adj, p) {
				edges += bits.OnesCount64(x)
			}
			for _, q := range comp {
				exact = exact || r[p*k+q] == L && p != q
			}
		}
		switch {
		case !exact:
		case edges == len(comp)*(len(comp)-1):
			out(slices.Clone(comp))
		default:
			c.greedy(L, comp, out)
		}
	}
}

// greedy covers the pairs of rank L of a component that is not a clique.
func (c *cover) greedy(L rank, comp []int, out func([]int)) {
	k := c.k
	cand := make([]uint64, c.words)
	for _, p := range comp {
		for _, q := range comp {
			if q <= p || c.r[p*k+q] != L || c.row(c.covered, p)[q/64]&(1<<(q%64)) != 0 {
				continue
			}
			group := []int{p, q}
			for w := range cand {
				cand[w] = c.row(c.adj, p)[w] & c.row(c.adj, q)[w]
			}
			for {
				v := lowestBit(cand)
				if v < 0 {
					break
				}
				group = append(group, v)
				for w, x := range c.row(c.adj, v) {
					cand[w] &= x
				}
			}
			slices.Sort(group)
			for _, a := range group {
				row := c.row(c.covered, a)
				for _, b := range group {
					row[b/64] |= 1 << (b % 64)
				}
			}
			out(group)
		}
	}
}

func anyBit(row []uint64) bool { return lowestBit(row) >= 0 }

func lowestBit(row []uint64) int {
	for w, x := range row {
		if x != 0 {
			return w*64 + bits.TrailingZeros64(x)
		}
	}
	return -1
}

// writeGroup writes sorted positions as ranges joined by '+': 0-3+8-11, 2+5.
func writeGroup(b *strings.Builder, group []int) {
	for i := 0; i < len(group); {
		j := i
		for j+1 < len(group) && group[j+1] == group[j]+1 {
			j++
		}
		if i > 0 {
			b.WriteByte('+')
		}
		b.WriteString(strconv.Itoa(group[i]))
		if j > i {
			b.WriteByte('-')
			b.WriteString(strconv.Itoa(group[j]))
		}
		i = j + 1
	}
}

// LinkLabels is a decoded EnvLinks value: the label of every pair of
// positions 0 … Len()-1, position p being the p-th device of
// VIRTUAL_GPU_IDS. Build one with ParseLinks. It is immutable and safe for
// concurrent use; a nil *LinkLabels has no positions.
type LinkLabels struct {
	n    int
	rank []rank // n*n, row-major, symmetric
}

// Len returns the number of positions.
func (l *LinkLabels) Len() int {
	if l == nil {
		return 0
	}
	return l.n
}

// Label returns what `nvidia-smi topo -m` prints for positions p and q: NV<n>
// or the PCIe relation (SYS, NODE, PHB, PXB, PIX, BOARD); "X" if p == q, as
// on the matrix's diagonal; "" if either is out of range.
func (l *LinkLabels) Label(p, q int) string {
	n := l.Len()
	switch {
	case p < 0 || q < 0 || p >= n || q >= n:
		return ""
	case p == q:
		return "X"
	}
	return rankLabel(l.rank[p*n+q])
}

// linkRange is one "a" or "a-b" of a group.
type linkRange struct{ lo, hi int }

type linkEntry struct {
	rank   rank
	groups [][]linkRange
}

// ParseLinks decodes an EnvLinks value for n positions (the number of
// devices in VIRTUAL_GPU_IDS); see EnvLinks for the format. The value must
// be empty if n < 2 and must start with a label otherwise. Entries are
// applied in order, a later one overriding an earlier one for the pairs it
// names. Errors wrap ErrInvalidLinks and name the entry and what was
// expected: an unknown label, a position outside 0 … n-1, a group of fewer
// than two positions, ranges out of order, an empty entry. n must be in 0 …
// MaxGPUs and the value at most MaxLinksBytes long. The work is bounded by
// the value's length times n²/64, whatever the value.
func ParseLinks(value string, n int) (*LinkLabels, error) {
	if n < 0 || n > MaxGPUs {
		return nil, fmt.Errorf("links for %d positions, want 0..%d: %w", n, MaxGPUs, ErrInvalidLinks)
	}
	if len(value) > MaxLinksBytes {
		return nil, fmt.Errorf("links value of %d bytes, want at most %d: %w", len(value), MaxLinksBytes, ErrInvalidLinks)
	}
	l := &LinkLabels{n: n, rank: make([]rank, n*n)}
	if value == "" {
		if n >= 2 {
			return nil, fmt.Errorf("empty links value for %d positions: expected a default label such as SYS: %w", n, ErrInvalidLinks)
		}
		return l, nil
	}
	parts := strings.Split(value, ";")
	def, ok := parseRank(parts[0])
	if !ok {
		return nil, linksErr(1, parts[0], "expected a default label (SYS, NODE, PHB, PXB, PIX, BOARD or NV1..NV18)")
	}
	entries := make([]linkEntry, 0, len(parts)-1)
	for i, part := range parts[1:] {
		e, err := parseLinkEntry(part, n)
		if err != nil {
			return nil, linksErr(i+2, part, err.Error())
		}
		entries = append(entries, e)
	}
	for i := range l.rank {
		l.rank[i] = def
	}
	l.apply(entries)
	return l, nil
}

func linksErr(entry int, text, msg string) error {
	if len(text) > 40 {
		text = text[:40] + "…"
	}
	return fmt.Errorf("links entry %d %q: %s: %w", entry, text, msg, ErrInvalidLinks)
}

// parseLinkEntry parses LABEL=GROUP,GROUP,… with positions below n.
func parseLinkEntry(s string, n int) (linkEntry, error) {
	label, list, ok := strings.Cut(s, "=")
	if !ok {
		return linkEntry{}, fmt.Errorf("expected LABEL=GROUP,… (only the first entry is a bare label)")
	}
	r, ok := parseRank(label)
	if !ok {
		return linkEntry{}, fmt.Errorf("label %q: expected SYS, NODE, PHB, PXB, PIX, BOARD or NV1..NV%d", label, MaxNVLinks)
	}
	e := linkEntry{rank: r}
	for g := range strings.SplitSeq(list, ",") {
		var group []linkRange
		size := 0
		for item := range strings.SplitSeq(g, "+") {
			a, b, isRange := strings.Cut(item, "-")
			lo, ok1 := parseNumber(a)
			hi, ok2 := lo, true
			if isRange {
				hi, ok2 = parseNumber(b)
			}
			switch {
			case !ok1 || !ok2:
				return linkEntry{}, fmt.Errorf("group %q: %q is not a position or range like 3 or 0-7", g, item)
			case hi >= n:
				return linkEntry{}, fmt.Errorf("group %q: position %d out of range: there are %d positions (0..%d)", g, hi, n, n-1)
			case lo > hi:
				return linkEntry{}, fmt.Errorf("group %q: range %q: expected the lower position first", g, item)
			case len(group) > 0 && lo <= group[len(group)-1].hi:
				return linkEntry{}, fmt.Errorf("group %q: %q: expected ascending positions, each once", g, item)
			}
			group = append(group, linkRange{lo, hi})
			size += hi - lo + 1
		}
		if size < 2 {
			return linkEntry{}, fmt.Errorf("group %q: expected at least two positions", g)
		}
		e.groups = append(e.groups, group)
	}
	return e, nil
}

// apply sets the rank of every pair named by entries, the last naming a
// pair winning. It goes backwards and remembers, per position p, which
// pairs (p, q>p) are decided, so each group costs its size × n/64 word
// operations plus the pairs it decides, however much groups overlap.
func (l *LinkLabels) apply(entries []linkEntry) {
	n := l.n
	words := (n + 63) / 64
	decided := make([]uint64, n*words)
	members := make([]uint64, words)
	for i := len(entries) - 1; i >= 0; i-- {
		e := entries[i]
		for gi := len(e.groups) - 1; gi >= 0; gi-- {
			group := e.groups[gi]
			clear(members)
			for _, rg := range group {
				for p := rg.lo; p <= rg.hi; p++ {
					members[p/64] |= 1 << (p % 64)
				}
			}
			for _, rg := range group {
				for p := rg.lo; p <= rg.hi; p++ {
					row := decided[p*words : (p+1)*words]
					for w := p / 64; w < words; w++ {
						x := members[w] &^ row[w]
						if w == p/64 {
							x &^= (2 << (p % 64)) - 1 // only q > p
						}
						row[w] |= x
						for ; x != 0; x &= x - 1 {
							q := w*64 + bits.TrailingZeros64(x)
							l.rank[p*n+q], l.rank[q*n+p] = e.rank, e.rank
						}
					}
				}
			}
		}
	}
}
