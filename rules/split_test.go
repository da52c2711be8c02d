package rules

import (
	"reflect"
	"testing"
)

func TestSplitTemplate(t *testing.T) {
	tests := []struct {
		in      string
		want    []segment
		wantErr string
	}{
		{in: "", want: nil},
		{in: "plain", want: []segment{{text: "plain"}}},
		{in: "${a}", want: []segment{{text: "a", expr: true}}},
		{in: "x${a}y", want: []segment{{text: "x"}, {text: "a", expr: true, offset: 1}, {text: "y"}}},
		{in: "${a}${b}", want: []segment{{text: "a", expr: true}, {text: "b", expr: true, offset: 4}}},
		{in: "$${a}", want: []segment{{text: "${a}"}}},
		{in: "$$${a}", want: []segment{{text: "$${a}"}}},
		{in: "a $ b { }", want: []segment{{text: "a $ b { }"}}},
		{in: "${ {'k': 1}.k }", want: []segment{{text: " {'k': 1}.k ", expr: true}}},
		{in: `${"}" + '}'}`, want: []segment{{text: `"}" + '}'`, expr: true}}},
		{in: `${"\"}"}`, want: []segment{{text: `"\"}"`, expr: true}}},
		{in: `${r"\"}`, want: []segment{{text: `r"\"`, expr: true}}},
		{in: `${"""a"}"""}`, want: []segment{{text: `"""a"}"""`, expr: true}}},
		{in: "é${a}", want: []segment{{text: "é"}, {text: "a", expr: true, offset: 1}}},
		{in: "${", wantErr: `unterminated ${: no closing "}"`},
		{in: "x ${a", wantErr: `unterminated ${: no closing "}"`},
		{in: "${'a}", wantErr: "unterminated string literal in ${...}"},
		{in: "${}", wantErr: "empty expression ${}"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := splitTemplate(tt.in)
			if tt.wantErr != "" {
				if err == nil || err.Error() != tt.wantErr {
					t.Fatalf("splitTemplate(%q) error = %v, want %q", tt.in, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("splitTemplate(%q) error: %v", tt.in, err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("splitTemplate(%q) = %+v, want %+v", tt.in, got, tt.want)
			}
		})
	}
}
