package preflight

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/gorun/gorun/internal/lazyre"
)

// ErrBadCapture marks nvidia-smi output (or a pasted copy of it) that gorun
// refuses to read because it is damaged: a missing header, a row with the
// wrong number of cells, an unknown token. Errors wrapping it name the line
// and column at fault; main maps it to exit code 2.
var ErrBadCapture = errors.New("damaged nvidia-smi capture")

// QueryGPUFields is the exact nvidia-smi argument list whose output
// ParseQueryGPU reads. The fallback collector runs
//
//	nvidia-smi --query-gpu=<QueryGPUFields> --format=csv,noheader,nounits
//
// so the column order is fixed here and nowhere else.
const QueryGPUFields = "index,name,uuid,pci.bus_id,memory.total,compute_mode,persistence_mode," +
	"pcie.link.gen.current,pcie.link.gen.max,pcie.link.width.current,pcie.link.width.max"

// QueryGPUArgs is the nvidia-smi argv (without the program name) for
// ParseQueryGPU.
func QueryGPUArgs() []string {
	return []string{"--query-gpu=" + QueryGPUFields, "--format=csv,noheader,nounits"}
}

// ansiEscape matches terminal colour and style sequences; nvidia-smi
// underlines the topology header with them.
var ansiEscape = lazyre.New(`\x1b\[[0-9;?]*[A-Za-z]`)

// captureLines strips ANSI sequences and splits text into lines, accepting
// LF, CRLF and a mix of both; a lone CR also ends a line. Line i of the
// result is line i+1 of the capture.
func captureLines(text []byte) []string {
	text = ansiEscape().ReplaceAll(text, nil)
	text = bytes.ReplaceAll(text, []byte("\r\n"), []byte("\n"))
	text = bytes.ReplaceAll(text, []byte("\r"), []byte("\n"))
	return strings.Split(string(text), "\n")
}

// badCapture builds an error wrapping ErrBadCapture at name:line:col.
// col <= 0 leaves the column out.
func badCapture(name string, line, col int, format string, args ...any) error {
	where := fmt.Sprintf("%s:%d", name, line)
	if col > 0 {
		where = fmt.Sprintf("%s:%d", where, col)
	}
	return fmt.Errorf("%s: %s: %w", where, fmt.Sprintf(format, args...), ErrBadCapture)
}

// SysfsBusID converts an NVML / nvidia-smi PCI bus id ("00000000:18:00.0",
// "0000:18:00.0", any case) to the lowercase sysfs form "0000:18:00.0".
func SysfsBusID(busID string) (string, error) {
	s := strings.TrimSpace(busID)
	dom, rest, ok := strings.Cut(s, ":")
	if !ok {
		return "", fmt.Errorf("PCI bus id %q: no domain", busID)
	}
	bus, rest, ok := strings.Cut(rest, ":")
	if !ok {
		return "", fmt.Errorf("PCI bus id %q: no bus", busID)
	}
	dev, fn, ok := strings.Cut(rest, ".")
	if !ok {
		return "", fmt.Errorf("PCI bus id %q: no function", busID)
	}
	d, err1 := strconv.ParseUint(dom, 16, 32)
	b, err2 := strconv.ParseUint(bus, 16, 8)
	v, err3 := strconv.ParseUint(dev, 16, 8)
	f, err4 := strconv.ParseUint(fn, 16, 8)
	if err := errors.Join(err1, err2, err3, err4); err != nil || len(dom) > 8 || v > 0x1f || f > 7 {
		return "", fmt.Errorf("PCI bus id %q: not domain:bus:device.function", busID)
	}
	return fmt.Sprintf("%04x:%02x:%02x.%x", d, b, v, f), nil
}

// unknownValue reports nvidia-smi's spellings of "no answer".
func unknownValue(v string) bool {
	switch v {
	case "", "[N/A]", "N/A", "[Not Supported]", "Not Supported", "[Unknown Error]", "[Insufficient Permissions]", "[GPU is lost]":
		return true
	}
	return false
}

// queryGPUColumns is QueryGPUFields split, for messages.
var queryGPUColumns = strings.Split(QueryGPUFields, ",")

// ParseQueryGPU reads the output of nvidia-smi with QueryGPUArgs: one GPU per
// line, comma-separated, no header, no units. A header line or unit suffixes
// ("143771 MiB") are tolerated. Values nvidia-smi could not answer ("[N/A]",
// "[Not Supported]") leave the field at its zero value and are named in
// GPUFacts.Unsupported. NUMANode is -1: nvidia-smi does not report it.
// A line with the wrong number of fields or an unreadable number is refused
// with an error wrapping ErrBadCapture.
func ParseQueryGPU(csv []byte) ([]GPUFacts, error) {
	const name = "nvidia-smi --query-gpu"
	var gpus []GPUFacts
	seen := map[int]bool{}
	for i, line := range captureLines(csv) {
		lineNo := i + 1
		if strings.TrimSpace(line) == "" {
			continue
		}
		fields := strings.Split(line, ",")
		for j := range fields {
			fields[j] = strings.TrimSpace(fields[j])
		}
		if len(gpus) == 0 && strings.EqualFold(fields[0], "index") {
			continue // a header from --format=csv
		}
		if len(fields) != len(queryGPUColumns) {
			return nil, badCapture(name, lineNo, 0, "%d fields, want %d (%s)", len(fields), len(queryGPUColumns), QueryGPUFields)
		}
		g, err := parseQueryGPULine(fields)
		if err != nil {
			return nil, badCapture(name, lineNo, 0, "%v", err)
		}
		if seen[g.Index] {
			return nil, badCapture(name, lineNo, 0, "GPU index %d listed twice", g.Index)
		}
		seen[g.Index] = true
		gpus = append(gpus, g)
	}
	return gpus, nil
}

func parseQueryGPULine(f []string) (GPUFacts, error) {
	g := GPUFacts{NUMANode: -1}
	unknown := func(col int) bool {
		if unknownValue(f[col]) {
			g.Unsupported = append(g.Unsupported, queryGPUColumns[col]+": "+strings.Trim(f[col], "[]"))
			return true
		}
		return false
	}
	number := func(col int, unit string) (uint64, error) {
		v := strings.TrimSpace(strings.TrimSuffix(f[col], unit))
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%s: %q is not a number", queryGPUColumns[col], f[col])
		}
		return n, nil
	}
	idx, err := number(0, "")
	if err != nil || idx > 1<<16 {
		return g, fmt.Errorf("index: %q is not a GPU index", f[0])
	}
	g.Index = int(idx)
	if !unknown(1) {
		g.Name = f[1]
	}
	if !unknown(2) {
		g.UUID = f[2]
	}
	if !unknown(3) {
		id, err := SysfsBusID(f[3])
		if err != nil {
			return g, err
		}
		g.BusID = id
	}
	if !unknown(4) {
		if g.MemoryMiB, err = number(4, "MiB"); err != nil {
			return g, err
		}
	}
	if !unknown(5) {
		switch f[5] {
		case "Default", "Exclusive_Thread", "Prohibited", "Exclusive_Process":
			g.ComputeMode = f[5]
		default:
			return g, fmt.Errorf("compute_mode: unknown value %q", f[5])
		}
	}
	if !unknown(6) {
		switch f[6] {
		case "Enabled":
			g.Persistence = true
		case "Disabled":
		default:
			return g, fmt.Errorf("persistence_mode: unknown value %q", f[6])
		}
	}
	for col, dst := range []*int{7: &g.PCIeGen, 8: &g.PCIeGenMax, 9: &g.PCIeWidth, 10: &g.PCIeWidthMax} {
		if dst == nil {
			continue
		}
		if unknown(col) {
			continue
		}
		n, err := number(col, "")
		if err != nil || n > 64 {
			return g, fmt.Errorf("%s: %q is not a PCIe generation or width", queryGPUColumns[col], f[col])
		}
		*dst = int(n)
	}
	slices.Sort(g.Unsupported)
	return g, nil
}

// p2pStatuses are the cells `nvidia-smi topo -p2p r|w|n|a` prints.
var p2pStatuses = map[string]bool{
	"X": true, P2POK: true, P2PChipsetNotSupported: true, P2PGPUNotSupported: true,
	P2PTopologyNotSupported: true, P2PNotSupported: true, P2PDisabledByRegkey: true, P2PUnknown: true,
}

var gpuLabel = lazyre.New(`^GPU[0-9]+$`)

// ParseP2PMatrix reads the output of `nvidia-smi topo -p2p r|w|n|a` (read,
// write, NVLink, atomics). The result is indexed [row][column] in the order
// of the header, with "X" on the diagonal and one of the P2P* status strings
// elsewhere. Leading command echoes and the trailing legend are skipped; a
// missing header, a short or long row, a duplicate row, an unknown status or
// a missing row is refused with an error wrapping ErrBadCapture.
func ParseP2PMatrix(text []byte) ([][]string, error) {
	const name = "nvidia-smi topo -p2p"
	lines := captureLines(text)
	var cols []string
	colIndex := map[string]int{}
	var m [][]string
	lastLine := 0
	for i, line := range lines {
		lineNo := i + 1
		fields := fieldsWithColumns(line)
		if len(fields) == 0 {
			if cols != nil {
				lastLine = lineNo
				break
			}
			continue
		}
		if cols == nil {
			if !gpuLabel().MatchString(fields[0].text) {
				continue // command echo, prompt
			}
			if len(fields) > 1 && p2pStatuses[fields[1].text] {
				return nil, badCapture(name, lineNo, fields[0].col, "matrix row %s before any header", fields[0].text)
			}
			for _, f := range fields {
				if !gpuLabel().MatchString(f.text) {
					return nil, badCapture(name, lineNo, f.col, "header cell %q is not a GPU name", f.text)
				}
				if _, dup := colIndex[f.text]; dup {
					return nil, badCapture(name, lineNo, f.col, "header names %s twice", f.text)
				}
				colIndex[f.text] = len(cols)
				cols = append(cols, f.text)
			}
			m = make([][]string, len(cols))
			continue
		}
		if strings.HasPrefix(fields[0].text, "Legend") {
			lastLine = lineNo
			break
		}
		row, ok := colIndex[fields[0].text]
		if !ok {
			return nil, badCapture(name, lineNo, fields[0].col, "row %q is not a header column", fields[0].text)
		}
		if m[row] != nil {
			return nil, badCapture(name, lineNo, fields[0].col, "duplicate row %s", fields[0].text)
		}
		cells := fields[1:]
		if len(cells) != len(cols) {
			return nil, badCapture(name, lineNo, cellCountColumn(line, fields, len(cols)), "row %s has %d cells, header has %d", fields[0].text, len(cells), len(cols))
		}
		m[row] = make([]string, len(cols))
		for j, c := range cells {
			if !p2pStatuses[c.text] {
				return nil, badCapture(name, lineNo, c.col, "unknown P2P status %q (want OK, CNS, GNS, TNS, NS, DR, U or X)", c.text)
			}
			if (c.text == "X") != (j == row) {
				return nil, badCapture(name, lineNo, c.col, "%q at %s/%s: X belongs on the diagonal only", c.text, cols[row], cols[j])
			}
			m[row][j] = c.text
		}
		lastLine = lineNo + 1
	}
	if cols == nil {
		return nil, badCapture(name, 1, 0, "no header line naming GPU0")
	}
	for i, r := range m {
		if r == nil {
			return nil, badCapture(name, lastLine, 0, "no row for %s", cols[i])
		}
	}
	return m, nil
}

// field is one whitespace-separated cell and its 1-based byte column.
type field struct {
	text string
	col  int
}

// fieldsWithColumns splits a line on runs of blanks (spaces and tabs), as
// nvidia-smi pads its matrices inconsistently, and keeps each cell's column.
func fieldsWithColumns(line string) []field {
	var out []field
	start := -1
	for i := 0; i <= len(line); i++ {
		blank := i == len(line) || line[i] == ' ' || line[i] == '\t' || line[i] == '\v' || line[i] == '\f'
		switch {
		case blank && start >= 0:
			out = append(out, field{line[start:i], start + 1})
			start = -1
		case !blank && start < 0:
			start = i
		}
	}
	return out
}

// cellCountColumn is where a row with the wrong number of cells goes wrong:
// the first extra cell, or just past the end of a short row.
func cellCountColumn(line string, fields []field, want int) int {
	if len(fields)-1 > want {
		return fields[want+1].col
	}
	return len(strings.TrimRight(line, " \t")) + 1
}
