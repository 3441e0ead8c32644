package cmdline

import (
	"errors"
	"strconv"
	"strings"
	"unicode"

	"github.com/gorun/gorun/internal/lazyre"
)

// pyStrip is Python's str.strip(): Unicode whitespace on both ends.
func pyStrip(s string) string { return strings.TrimFunc(s, unicode.IsSpace) }

// pyInt parses like Python's int(str): surrounding whitespace, a sign, and
// single underscores between ASCII digits. Values beyond int64 are refused.
func pyInt(s string) (int64, bool) {
	s = pyStrip(s)
	if !pyDigits().MatchString(s) {
		return 0, false
	}
	n, err := strconv.ParseInt(strings.ReplaceAll(s, "_", ""), 10, 64)
	if err != nil {
		return 0, false
	}
	return n, true
}

var (
	pyDigits     = lazyre.New(`^[+-]?[0-9](?:_?[0-9])*$`)
	pyFloatRe    = lazyre.New(`^[+-]?(?:(?:[0-9](?:_?[0-9])*)(?:\.(?:[0-9](?:_?[0-9])*)?)?|\.[0-9](?:_?[0-9])*)(?:[eE][+-]?[0-9](?:_?[0-9])*)?$`)
	pyFloatWords = lazyre.New(`^(?i)[+-]?(?:inf|infinity|nan)$`)
)

// pyFloat parses like Python's float(str), which unlike strconv refuses hex
// and accepts underscores between digits.
func pyFloat(s string) (float64, bool) {
	s = pyStrip(s)
	if pyFloatWords().MatchString(s) {
		f, err := strconv.ParseFloat(s, 64)
		return f, err == nil
	}
	if !pyFloatRe().MatchString(s) {
		return 0, false
	}
	f, err := strconv.ParseFloat(strings.ReplaceAll(s, "_", ""), 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		return 0, false
	}
	return f, true
}
