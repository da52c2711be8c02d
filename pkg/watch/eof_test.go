package watch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"testing"
)

// The watch error handler skips a watch that closed normally (io.EOF
// itself), not a list cut short, whose error wraps io.EOF: that one is a
// failure kgen reports.
func TestEOFIsNotAFailure(t *testing.T) {
	cut := fmt.Errorf("failed to list: %w", &url.Error{Op: "Get", URL: "https://api/configmaps", Err: io.EOF})
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{io.EOF, false},
		{cut, true},
		{errors.New("forbidden"), true},
	} {
		var told []error
		handle := watchErrorHandler(Key{}, func(_ Key, err error) { told = append(told, err) })
		handle(context.Background(), nil, tc.err)
		if got := len(told) > 0; got != tc.want {
			t.Errorf("%v: reported %t, want %t", tc.err, got, tc.want)
		}
	}
}
