package protocol

// JSON.stringify-compatible encoding. encoding/json differs from JS in ways a
// byte-exact port cannot keep: it escapes <, >, &, U+2028 and U+2029, appends
// a newline from Encoder, replaces lone surrogates with U+FFFD, and prints
// floats differently. This encoder writes what JS writes.

import (
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// Marshal encodes v as JSON.stringify would: no whitespace, no trailing
// newline, JS string escaping, JS number rendering. Structs encode in field
// order using json tags (name, omitempty, "-"); maps encode with sorted keys;
// *Object keeps its key order. A nil slice encodes as [] (a JS array is never
// null) unless the field is omitempty. json.RawMessage is copied verbatim
// (it must already be JS-style JSON); other json.Marshaler values are called.
// NaN and ±Inf encode as null, as in JS.
func Marshal(v any) ([]byte, error) {
	// The planes encode these scalars per request; they need no reflection.
	switch x := v.(type) {
	case string:
		return AppendJSString(make([]byte, 0, len(x)+2), x), nil
	case int64:
		return strconv.AppendInt(nil, x, 10), nil
	case int:
		return strconv.AppendInt(nil, int64(x), 10), nil
	case bool:
		return strconv.AppendBool(nil, x), nil
	case json.RawMessage:
		if len(x) == 0 {
			return []byte("null"), nil
		}
		return append([]byte(nil), x...), nil
	}
	e := encoder{b: make([]byte, 0, 256)}
	if err := e.value(reflect.ValueOf(v)); err != nil {
		return nil, fmt.Errorf("protocol marshal: %w", err)
	}
	return e.b, nil
}

// MustMarshal is Marshal for values whose types cannot fail (no channels,
// funcs or failing Marshalers); it panics otherwise.
func MustMarshal(v any) []byte {
	b, err := Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

type encoder struct{ b []byte }

var (
	rawMessageType = reflect.TypeFor[json.RawMessage]()
	marshalerType  = reflect.TypeFor[json.Marshaler]()
	objectPtrType  = reflect.TypeFor[*Object]()
	numberType     = reflect.TypeFor[Number]()
)

func (e *encoder) value(v reflect.Value) error {
	if !v.IsValid() {
		e.b = append(e.b, "null"...)
		return nil
	}
	t := v.Type()
	switch {
	case t == rawMessageType:
		raw := v.Bytes()
		if len(raw) == 0 {
			e.b = append(e.b, "null"...)
		} else {
			e.b = append(e.b, raw...)
		}
		return nil
	case t == objectPtrType:
		o := v.Interface().(*Object)
		if o == nil {
			e.b = append(e.b, "null"...)
			return nil
		}
		e.b = append(e.b, '{')
		for i, k := range o.Keys {
			if i > 0 {
				e.b = append(e.b, ',')
			}
			e.b = AppendJSString(e.b, k)
			e.b = append(e.b, ':')
			if err := e.value(reflect.ValueOf(o.Vals[k])); err != nil {
				return err
			}
		}
		e.b = append(e.b, '}')
		return nil
	case t == numberType:
		e.b = AppendJSNumber(e.b, v.Float())
		return nil
	case t.Kind() != reflect.Interface && t.Implements(marshalerType) && !(t.Kind() == reflect.Pointer && v.IsNil()):
		out, err := v.Interface().(json.Marshaler).MarshalJSON()
		if err != nil {
			return err
		}
		e.b = append(e.b, out...)
		return nil
	}
	switch t.Kind() {
	case reflect.Interface, reflect.Pointer:
		if v.IsNil() {
			e.b = append(e.b, "null"...)
			return nil
		}
		return e.value(v.Elem())
	case reflect.Bool:
		e.b = strconv.AppendBool(e.b, v.Bool())
	case reflect.String:
		e.b = AppendJSString(e.b, v.String())
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		e.b = strconv.AppendInt(e.b, v.Int(), 10)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		e.b = strconv.AppendUint(e.b, v.Uint(), 10)
	case reflect.Float32, reflect.Float64:
		e.b = AppendJSNumber(e.b, v.Float())
	case reflect.Slice, reflect.Array:
		e.b = append(e.b, '[')
		for i := 0; i < v.Len(); i++ {
			if i > 0 {
				e.b = append(e.b, ',')
			}
			if err := e.value(v.Index(i)); err != nil {
				return err
			}
		}
		e.b = append(e.b, ']')
	case reflect.Map:
		if v.IsNil() {
			e.b = append(e.b, "null"...)
			return nil
		}
		if t.Key().Kind() != reflect.String {
			return fmt.Errorf("unsupported map key type %s", t.Key())
		}
		keys := v.MapKeys()
		slices.SortFunc(keys, func(a, b reflect.Value) int { return strings.Compare(a.String(), b.String()) })
		e.b = append(e.b, '{')
		for i, k := range keys {
			if i > 0 {
				e.b = append(e.b, ',')
			}
			e.b = AppendJSString(e.b, k.String())
			e.b = append(e.b, ':')
			if err := e.value(v.MapIndex(k)); err != nil {
				return err
			}
		}
		e.b = append(e.b, '}')
	case reflect.Struct:
		return e.structValue(v)
	default:
		return fmt.Errorf("unsupported type %s", t)
	}
	return nil
}

type fieldInfo struct {
	index     []int
	name      string
	key       []byte // the encoded name and its colon: "name":
	omitEmpty bool
}

var fieldCache sync.Map // reflect.Type -> []fieldInfo

func structFields(t reflect.Type) []fieldInfo {
	if f, ok := fieldCache.Load(t); ok {
		return f.([]fieldInfo)
	}
	var out []fieldInfo
	for i := 0; i < t.NumField(); i++ {
		sf := t.Field(i)
		tag := sf.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if sf.Anonymous && name == "" {
			ft := sf.Type
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				for _, inner := range structFields(ft) {
					inner.index = append([]int{i}, inner.index...)
					out = append(out, inner)
				}
				continue
			}
		}
		if !sf.IsExported() {
			continue
		}
		if name == "" {
			name = sf.Name
		}
		out = append(out, fieldInfo{index: []int{i}, name: name, key: append(AppendJSString(nil, name), ':'),
			omitEmpty: slices.Contains(strings.Split(opts, ","), "omitempty")})
	}
	fieldCache.Store(t, out)
	return out
}

func isEmptyValue(v reflect.Value) bool {
	switch v.Kind() {
	case reflect.Array, reflect.Map, reflect.Slice, reflect.String:
		return v.Len() == 0
	case reflect.Bool:
		return !v.Bool()
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return v.Int() == 0
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return v.Uint() == 0
	case reflect.Float32, reflect.Float64:
		return v.Float() == 0
	case reflect.Interface, reflect.Pointer:
		return v.IsNil()
	}
	return false
}

func (e *encoder) structValue(v reflect.Value) error {
	e.b = append(e.b, '{')
	first := true
	for _, f := range structFields(v.Type()) {
		fv, ok := fieldByIndex(v, f.index)
		if !ok {
			continue // nil embedded pointer
		}
		if f.omitEmpty && isEmptyValue(fv) {
			continue
		}
		if !first {
			e.b = append(e.b, ',')
		}
		first = false
		e.b = append(e.b, f.key...)
		if fv.Kind() == reflect.Slice && fv.IsNil() && fv.Type() != rawMessageType {
			e.b = append(e.b, "[]"...)
			continue
		}
		if err := e.value(fv); err != nil {
			return fmt.Errorf("field %s: %w", f.name, err)
		}
	}
	e.b = append(e.b, '}')
	return nil
}

func fieldByIndex(v reflect.Value, index []int) (reflect.Value, bool) {
	for i, x := range index {
		if i > 0 && v.Kind() == reflect.Pointer {
			if v.IsNil() {
				return reflect.Value{}, false
			}
			v = v.Elem()
		}
		v = v.Field(x)
	}
	return v, true
}

const hexDigits = "0123456789abcdef"

// AppendJSString appends s as a JSON.stringify string literal. s is WTF-8
// (see ParseJSON): a lone surrogate is written as \udxxx; any other invalid
// byte (which a JS string cannot hold) is written as U+FFFD.
func AppendJSString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0 // s[start:i] is plain ASCII not yet appended
	for i := 0; i < len(s); {
		c := s[i]
		if c >= 0x20 && c < 0x80 && c != '"' && c != '\\' {
			i++
			continue
		}
		b = append(b, s[start:i]...)
		if c < 0x80 {
			i++
			switch c {
			case '"':
				b = append(b, '\\', '"')
			case '\\':
				b = append(b, '\\', '\\')
			case '\b':
				b = append(b, '\\', 'b')
			case '\t':
				b = append(b, '\\', 't')
			case '\n':
				b = append(b, '\\', 'n')
			case '\f':
				b = append(b, '\\', 'f')
			case '\r':
				b = append(b, '\\', 'r')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			start = i
			continue
		}
		r, w := decodeWTF8(s[i:])
		switch {
		case r >= 0xd800 && r <= 0xdfff:
			b = append(b, '\\', 'u', hexDigits[r>>12], hexDigits[r>>8&0xf], hexDigits[r>>4&0xf], hexDigits[r&0xf])
		case w == 1: // invalid byte
			b = append(b, "\uFFFD"...)
		default:
			b = append(b, s[i:i+w]...)
		}
		i += w
		start = i
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// AppendJSNumber appends f as JS Number.prototype.toString (radix 10) does,
// and null for NaN or ±Infinity as JSON.stringify does.
func AppendJSNumber(b []byte, f float64) []byte {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return append(b, "null"...)
	}
	return append(b, JSNumberString(f)...)
}

// JSNumberString is String(f) in JS for a finite f (ECMA-262 Number::toString).
func JSNumberString(f float64) string {
	if math.IsNaN(f) {
		return "NaN"
	}
	if math.IsInf(f, 1) {
		return "Infinity"
	}
	if math.IsInf(f, -1) {
		return "-Infinity"
	}
	if f == 0 {
		return "0"
	}
	sign := ""
	if f < 0 {
		sign = "-"
		f = -f
	}
	// Shortest round-tripping digits, as ECMA-262 requires.
	e := strconv.FormatFloat(f, 'e', -1, 64) // d.dddde±XX
	mant, expStr, _ := strings.Cut(e, "e")
	digits := strings.Replace(mant, ".", "", 1)
	exp, _ := strconv.Atoi(expStr)
	k := len(digits)
	n := exp + 1
	switch {
	case k <= n && n <= 21:
		return sign + digits + strings.Repeat("0", n-k)
	case 0 < n && n <= 21:
		return sign + digits[:n] + "." + digits[n:]
	case -6 < n && n <= 0:
		return sign + "0." + strings.Repeat("0", -n) + digits
	}
	es := "+"
	if n-1 < 0 {
		es = "-"
	}
	ev := n - 1
	if ev < 0 {
		ev = -ev
	}
	if k == 1 {
		return sign + digits + "e" + es + strconv.Itoa(ev)
	}
	return sign + digits[:1] + "." + digits[1:] + "e" + es + strconv.Itoa(ev)
}
