package rules

import (
	"errors"
	"strings"
	"unicode/utf8"
)

// segment is a piece of a template string: literal text, or the source of
// one ${...} expression.
type segment struct {
	text   string
	expr   bool
	offset int // for an expression, the offset in characters of its "${"
}

// splitError is a malformed ${...} at a character offset of the string.
type splitError struct {
	offset int
	msg    string
}

func (e *splitError) Error() string { return e.msg }

// splitTemplate splits a string into literal text and ${...} expressions.
// "$${" is a literal "${". An expression ends at the first "}" that closes
// no "{" of its own and is outside CEL string literals, so maps and strings
// holding braces may appear inside.
func splitTemplate(s string) ([]segment, error) {
	var segs []segment
	var text strings.Builder
	flush := func() {
		if text.Len() > 0 {
			segs = append(segs, segment{text: text.String()})
			text.Reset()
		}
	}
	for i := 0; i < len(s); {
		switch {
		case strings.HasPrefix(s[i:], "$${"):
			text.WriteString("${")
			i += 3
		case strings.HasPrefix(s[i:], "${"):
			end, err := exprEnd(s, i+2)
			offset := utf8.RuneCountInString(s[:i])
			if err != nil {
				return nil, &splitError{offset: offset, msg: err.Error()}
			}
			src := s[i+2 : end]
			if strings.TrimSpace(src) == "" {
				return nil, &splitError{offset: offset, msg: "empty expression ${}"}
			}
			flush()
			segs = append(segs, segment{text: src, expr: true, offset: offset})
			i = end + 1
		default:
			text.WriteByte(s[i])
			i++
		}
	}
	flush()
	return segs, nil
}

// exprEnd returns the index of the "}" that closes an expression starting at
// start (just after its "${").
func exprEnd(s string, start int) (int, error) {
	depth := 0
	for i := start; i < len(s); i++ {
		switch c := s[i]; c {
		case '{':
			depth++
		case '}':
			if depth == 0 {
				return i, nil
			}
			depth--
		case '"', '\'':
			end, err := stringEnd(s, i)
			if err != nil {
				return 0, err
			}
			i = end
		}
	}
	return 0, errors.New(`unterminated ${: no closing "}"`)
}

// stringEnd returns the index of the last quote of the CEL string literal
// whose opening quote is at s[i]. Raw strings (r"...") take backslashes
// literally; triple quotes may span quotes of their own kind.
func stringEnd(s string, i int) (int, error) {
	q := s[i]
	raw := isRawPrefix(s, i)
	delim := string(q)
	if strings.HasPrefix(s[i:], strings.Repeat(string(q), 3)) {
		delim = strings.Repeat(string(q), 3)
	}
	for j := i + len(delim); j < len(s); j++ {
		if s[j] == '\\' && !raw {
			j++
			continue
		}
		if strings.HasPrefix(s[j:], delim) {
			return j + len(delim) - 1, nil
		}
	}
	return 0, errors.New("unterminated string literal in ${...}")
}

// isRawPrefix tells whether the quote at s[i] opens a raw string: it follows
// r or R, possibly with b or B (br"", rb""), not as part of an identifier.
func isRawPrefix(s string, i int) bool {
	j := i
	raw := false
	for n := 0; n < 2 && j > 0; n++ {
		c := s[j-1]
		if c == 'r' || c == 'R' {
			raw = true
		} else if c != 'b' && c != 'B' {
			break
		}
		j--
	}
	if !raw {
		return false
	}
	if j > 0 {
		c := s[j-1]
		if c == '_' || c == '.' || ('a' <= c && c <= 'z') || ('A' <= c && c <= 'Z') || ('0' <= c && c <= '9') {
			return false
		}
	}
	return true
}
