package protocol

// Strict schema checking over ParseJSON values with zod 4.6.7 semantics
// (wire.md §1.3): strict objects at every level, optional keys may be absent
// but not null, string limits in code points, integers are safe integers
// (1.0 and 1e3 pass), exact enums and literals.

import (
	"fmt"
	"math"
	"slices"
	"strconv"
)

// SchemaError names the first place a value failed its schema, e.g.
// "devices[2].device.identity: expected string".
type SchemaError struct {
	Path string
	Msg  string
}

func (e *SchemaError) Error() string {
	if e.Path == "" {
		return e.Msg
	}
	return e.Path + ": " + e.Msg
}

func schemaErr(path, format string, args ...any) error {
	return &SchemaError{Path: path, Msg: fmt.Sprintf(format, args...)}
}

// JoinPath appends a key to a schema path.
func JoinPath(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// IndexPath appends an array index to a schema path.
func IndexPath(path string, i int) string { return path + "[" + strconv.Itoa(i) + "]" }

func typeName(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "boolean"
	case Number:
		return "number"
	case string:
		return "string"
	case []any:
		return "array"
	case *Object:
		return "object"
	}
	return fmt.Sprintf("%T", v)
}

// Fields reads the keys of one strict object.
type Fields struct {
	obj  *Object
	path string
}

// StrictObject checks that v is an object whose keys are all in allowed.
func StrictObject(v any, path string, allowed ...string) (*Fields, error) {
	o, ok := v.(*Object)
	if !ok {
		return nil, schemaErr(path, "expected object, received %s", typeName(v))
	}
	for _, k := range o.Keys {
		if !slices.Contains(allowed, k) {
			return nil, schemaErr(path, "unrecognized key %q", k)
		}
	}
	return &Fields{obj: o, path: path}, nil
}

// Path is the object's own path.
func (f *Fields) Path() string { return f.path }

// Has reports whether key is present (with any value, null included).
func (f *Fields) Has(key string) bool {
	_, ok := f.obj.Get(key)
	return ok
}

// Raw returns the value under key and its path.
func (f *Fields) Raw(key string) (any, string, bool) {
	v, ok := f.obj.Get(key)
	return v, JoinPath(f.path, key), ok
}

func (f *Fields) required(key string) (any, string, error) {
	v, p, ok := f.Raw(key)
	if !ok {
		return nil, p, schemaErr(p, "required")
	}
	return v, p, nil
}

// CheckString applies string().min(lo).max(hi) (hi < 0: no max).
func CheckString(v any, path string, lo, hi int) (string, error) {
	s, ok := v.(string)
	if !ok {
		return "", schemaErr(path, "expected string, received %s", typeName(v))
	}
	n := CodePoints(s)
	if n < lo {
		return "", schemaErr(path, "too short: expected at least %d characters", lo)
	}
	if hi >= 0 && n > hi {
		return "", schemaErr(path, "too long: expected at most %d characters", hi)
	}
	return s, nil
}

// String reads a required string with code-point limits (hi < 0: no max).
func (f *Fields) String(key string, lo, hi int) (string, error) {
	v, p, err := f.required(key)
	if err != nil {
		return "", err
	}
	return CheckString(v, p, lo, hi)
}

// OptString reads an optional string; present is false when absent.
func (f *Fields) OptString(key string, lo, hi int) (s string, present bool, err error) {
	v, p, ok := f.Raw(key)
	if !ok {
		return "", false, nil
	}
	s, err = CheckString(v, p, lo, hi)
	return s, err == nil, err
}

// Literal reads a required key that must be exactly the string want.
func (f *Fields) Literal(key, want string) (string, error) {
	v, p, err := f.required(key)
	if err != nil {
		return "", err
	}
	if s, ok := v.(string); !ok || s != want {
		return "", schemaErr(p, "expected %q", want)
	}
	return want, nil
}

// CheckEnum applies z.enum(options).
func CheckEnum(v any, path string, options ...string) (string, error) {
	s, ok := v.(string)
	if !ok || !slices.Contains(options, s) {
		return "", schemaErr(path, "expected one of %q", options)
	}
	return s, nil
}

// Enum reads a required enum value.
func (f *Fields) Enum(key string, options ...string) (string, error) {
	v, p, err := f.required(key)
	if err != nil {
		return "", err
	}
	return CheckEnum(v, p, options...)
}

// CheckInt applies number().int().min(lo).max(hi): a finite safe integer in
// [lo, hi]. positive() is lo = 1.
func CheckInt(v any, path string, lo, hi int64) (int64, error) {
	n, ok := v.(Number)
	if !ok {
		return 0, schemaErr(path, "expected number, received %s", typeName(v))
	}
	f := float64(n)
	if math.IsInf(f, 0) || math.IsNaN(f) {
		return 0, schemaErr(path, "expected number, received %s", JSNumberString(f))
	}
	if !isSafeInteger(f) {
		return 0, schemaErr(path, "expected int")
	}
	i := int64(f)
	if i < lo {
		return 0, schemaErr(path, "too small: expected >= %d", lo)
	}
	if i > hi {
		return 0, schemaErr(path, "too big: expected <= %d", hi)
	}
	return i, nil
}

// MaxSafeInteger is Number.MAX_SAFE_INTEGER.
const MaxSafeInteger = 1<<53 - 1

// Int reads a required integer in [lo, hi].
func (f *Fields) Int(key string, lo, hi int64) (int64, error) {
	v, p, err := f.required(key)
	if err != nil {
		return 0, err
	}
	return CheckInt(v, p, lo, hi)
}

// OptInt reads an optional integer in [lo, hi].
func (f *Fields) OptInt(key string, lo, hi int64) (n int64, present bool, err error) {
	v, p, ok := f.Raw(key)
	if !ok {
		return 0, false, nil
	}
	n, err = CheckInt(v, p, lo, hi)
	return n, err == nil, err
}

// Bool reads a required boolean.
func (f *Fields) Bool(key string) (bool, error) {
	v, p, err := f.required(key)
	if err != nil {
		return false, err
	}
	b, ok := v.(bool)
	if !ok {
		return false, schemaErr(p, "expected boolean, received %s", typeName(v))
	}
	return b, nil
}

// OptBool reads an optional boolean.
func (f *Fields) OptBool(key string) (b, present bool, err error) {
	if !f.Has(key) {
		return false, false, nil
	}
	b, err = f.Bool(key)
	return b, err == nil, err
}

// Array reads a required array with length limits (hi < 0: no max) and
// returns its elements and its path (use IndexPath for elements).
func (f *Fields) Array(key string, lo, hi int) ([]any, string, error) {
	v, p, err := f.required(key)
	if err != nil {
		return nil, p, err
	}
	a, err := CheckArray(v, p, lo, hi)
	return a, p, err
}

// OptArray reads an optional array; present is false when absent.
func (f *Fields) OptArray(key string, lo, hi int) (a []any, path string, present bool, err error) {
	v, p, ok := f.Raw(key)
	if !ok {
		return nil, p, false, nil
	}
	a, err = CheckArray(v, p, lo, hi)
	return a, p, err == nil, err
}

// CheckArray applies array().min(lo).max(hi).
func CheckArray(v any, path string, lo, hi int) ([]any, error) {
	a, ok := v.([]any)
	if !ok {
		return nil, schemaErr(path, "expected array, received %s", typeName(v))
	}
	if len(a) < lo {
		return nil, schemaErr(path, "too small: expected at least %d items", lo)
	}
	if hi >= 0 && len(a) > hi {
		return nil, schemaErr(path, "too big: expected at most %d items", hi)
	}
	return a, nil
}

// Each decodes every element of an array with dec.
func Each[T any](items []any, path string, dec func(v any, path string) (T, error)) ([]T, error) {
	out := make([]T, 0, len(items))
	for i, it := range items {
		t, err := dec(it, IndexPath(path, i))
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, nil
}

// DecodeStringItem is string().min(1) as an element decoder.
func DecodeStringItem(v any, path string) (string, error) { return CheckString(v, path, 1, -1) }
