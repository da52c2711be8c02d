package rules

import (
	"crypto/rand"
	"fmt"
	"math/big"

	"github.com/google/cel-go/cel"
	celast "github.com/google/cel-go/common/ast"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
)

// randomStringFn is the name of the CEL function that generates a random
// string.
const randomStringFn = "randomString"

// MaxRandomString bounds n in randomString(n).
const MaxRandomString = 256

// randomAlphabet are the characters randomString draws from.
const randomAlphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"

// cryptoRandomString returns n characters of randomAlphabet drawn with
// crypto/rand.
func cryptoRandomString(n int) (string, error) {
	b := make([]byte, n)
	max := big.NewInt(int64(len(randomAlphabet)))
	for i := range b {
		j, err := rand.Int(rand.Reader, max)
		if err != nil {
			return "", err
		}
		b[i] = randomAlphabet[j.Int64()]
	}
	return string(b), nil
}

// PlaceholderRandomString is an Options.RandomString for showing rules
// without generating secrets (kgenctl render): it returns n characters of
// "RANDOM" repeated, so the output is the same every time.
func PlaceholderRandomString(n int) (string, error) {
	b := make([]byte, n)
	for i := range b {
		b[i] = "RANDOM"[i%len("RANDOM")]
	}
	return string(b), nil
}

// randomStringFunction declares randomString(int) -> string, generating with
// gen.
func randomStringFunction(gen func(n int) (string, error)) cel.EnvOption {
	return cel.Function(randomStringFn,
		cel.Overload("randomString_int", []*cel.Type{cel.IntType}, cel.StringType,
			cel.UnaryBinding(func(arg ref.Val) ref.Val {
				n, ok := arg.(types.Int)
				if !ok {
					return types.MaybeNoSuchOverloadErr(arg)
				}
				if n < 1 || n > MaxRandomString {
					return types.NewErr("randomString(%d): n must be between 1 and %d", int64(n), MaxRandomString)
				}
				s, err := gen(int(n))
				if err != nil {
					return types.NewErr("randomString: %v", err)
				}
				return types.String(s)
			})))
}

// callsRandomString tells whether an expression calls randomString.
func callsRandomString(ast *cel.Ast) bool {
	nav := celast.NavigateAST(ast.NativeRep())
	calls := celast.MatchDescendants(nav, func(e celast.NavigableExpr) bool {
		return e.Kind() == celast.CallKind && e.AsCall().FunctionName() == randomStringFn
	})
	return len(calls) > 0
}

// checkRandomArgs reports a literal n of randomString(n) out of bounds.
func checkRandomArgs(ast *cel.Ast) error {
	nav := celast.NavigateAST(ast.NativeRep())
	for _, call := range celast.MatchDescendants(nav, func(e celast.NavigableExpr) bool {
		return e.Kind() == celast.CallKind && e.AsCall().FunctionName() == randomStringFn
	}) {
		args := call.AsCall().Args()
		if len(args) != 1 || args[0].Kind() != celast.LiteralKind {
			continue
		}
		if n, ok := args[0].AsLiteral().(types.Int); ok && (n < 1 || n > MaxRandomString) {
			return fmt.Errorf("randomString(%d): n must be between 1 and %d", int64(n), MaxRandomString)
		}
	}
	return nil
}
