package httpdoor

// A parser for the Structured Field Values of RFC 9651 that the door reads: Items
// (Upload-Offset, Upload-Length, Upload-Complete, Upload-Draft-Interop-Version) and
// Dictionaries (Content-Digest, Repr-Digest, Want-Repr-Digest). It is written by hand
// because the standard library has none and these few hundred lines are cheaper than a
// dependency; FuzzStructuredFields checks it. Parsing follows RFC 9651 section 4.2
// step by step, so anything it accepts is well-formed, and a malformed field fails
// whole (the protocols then ignore the field).

import (
	"encoding/base64"
	"errors"
	"strconv"
	"strings"
	"unicode/utf8"
)

// sfToken is a Token bare item; sfDate a Date; sfDisplay a Display String. Other bare
// items are int64 (Integer), sfDecimal, string, []byte (Byte Sequence) and bool.
type (
	sfToken   string
	sfDate    int64
	sfDisplay string
	// sfDecimal is a Decimal in thousandths (its precision).
	sfDecimal int64
)

type sfParam struct {
	Key   string
	Value any
}

type sfItem struct {
	Value  any
	Params []sfParam
}

type sfInnerList struct {
	Items  []sfItem
	Params []sfParam
}

// sfMember is a Dictionary member: an Item or, when List is non-nil, an Inner List.
type sfMember struct {
	Key  string
	Item sfItem
	List *sfInnerList
}

var errSF = errors.New("malformed structured field")

type sfParser struct {
	s string
	i int
}

func (p *sfParser) eof() bool { return p.i >= len(p.s) }
func (p *sfParser) peek() byte {
	if p.eof() {
		return 0
	}
	return p.s[p.i]
}
func (p *sfParser) skipSP() {
	for !p.eof() && p.s[p.i] == ' ' {
		p.i++
	}
}
func (p *sfParser) skipOWS() {
	for !p.eof() && (p.s[p.i] == ' ' || p.s[p.i] == '\t') {
		p.i++
	}
}

// parseSFItem parses a field value as an Item.
func parseSFItem(v string) (sfItem, error) {
	p := &sfParser{s: v}
	p.skipSP()
	it, err := p.item()
	if err != nil {
		return sfItem{}, err
	}
	p.skipSP()
	if !p.eof() {
		return sfItem{}, errSF
	}
	return it, nil
}

// parseSFDictionary parses a field value as a Dictionary. A key that appears twice keeps
// its last value at its first position.
func parseSFDictionary(v string) ([]sfMember, error) {
	p := &sfParser{s: v}
	p.skipSP()
	var out []sfMember
	index := map[string]int{}
	for !p.eof() {
		key, err := p.key()
		if err != nil {
			return nil, err
		}
		m := sfMember{Key: key}
		if p.peek() == '=' {
			p.i++
			if p.peek() == '(' {
				l, err := p.innerList()
				if err != nil {
					return nil, err
				}
				m.List = &l
			} else if m.Item, err = p.item(); err != nil {
				return nil, err
			}
		} else {
			params, err := p.params()
			if err != nil {
				return nil, err
			}
			m.Item = sfItem{Value: true, Params: params}
		}
		if j, ok := index[key]; ok {
			out[j] = m
		} else {
			index[key] = len(out)
			out = append(out, m)
		}
		p.skipOWS()
		if p.eof() {
			return out, nil
		}
		if p.peek() != ',' {
			return nil, errSF
		}
		p.i++
		p.skipOWS()
		if p.eof() {
			return nil, errSF // trailing comma
		}
	}
	return out, nil
}

func (p *sfParser) item() (sfItem, error) {
	v, err := p.bareItem()
	if err != nil {
		return sfItem{}, err
	}
	params, err := p.params()
	if err != nil {
		return sfItem{}, err
	}
	return sfItem{Value: v, Params: params}, nil
}

func (p *sfParser) innerList() (sfInnerList, error) {
	p.i++ // '('
	var l sfInnerList
	for !p.eof() {
		p.skipSP()
		if p.peek() == ')' {
			p.i++
			params, err := p.params()
			if err != nil {
				return l, err
			}
			l.Params = params
			return l, nil
		}
		it, err := p.item()
		if err != nil {
			return l, err
		}
		l.Items = append(l.Items, it)
		if c := p.peek(); c != ' ' && c != ')' {
			return l, errSF
		}
	}
	return l, errSF
}

func (p *sfParser) params() ([]sfParam, error) {
	var out []sfParam
	for p.peek() == ';' {
		p.i++
		p.skipSP()
		key, err := p.key()
		if err != nil {
			return nil, err
		}
		var v any = true
		if p.peek() == '=' {
			p.i++
			if v, err = p.bareItem(); err != nil {
				return nil, err
			}
		}
		replaced := false
		for j := range out {
			if out[j].Key == key {
				out[j].Value, replaced = v, true
			}
		}
		if !replaced {
			out = append(out, sfParam{key, v})
		}
	}
	return out, nil
}

func (p *sfParser) key() (string, error) {
	start := p.i
	c := p.peek()
	if !(c >= 'a' && c <= 'z' || c == '*') {
		return "", errSF
	}
	p.i++
	for !p.eof() {
		c := p.s[p.i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.' || c == '*') {
			break
		}
		p.i++
	}
	return p.s[start:p.i], nil
}

func (p *sfParser) bareItem() (any, error) {
	c := p.peek()
	switch {
	case c == '-' || c >= '0' && c <= '9':
		return p.number()
	case c == '"':
		return p.str()
	case c == '*' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z':
		return p.token(), nil
	case c == ':':
		return p.bytes()
	case c == '?':
		if p.i+1 < len(p.s) && (p.s[p.i+1] == '0' || p.s[p.i+1] == '1') {
			p.i += 2
			return p.s[p.i-1] == '1', nil
		}
		return nil, errSF
	case c == '@':
		p.i++
		n, err := p.number()
		if err != nil {
			return nil, err
		}
		d, ok := n.(int64)
		if !ok {
			return nil, errSF
		}
		return sfDate(d), nil
	case c == '%':
		return p.display()
	}
	return nil, errSF
}

// number parses an Integer (at most 15 digits) or a Decimal (at most 12 integer and 3
// fraction digits). strconv alone would accept "+1", "1_000" and longer numbers.
func (p *sfParser) number() (any, error) {
	neg := false
	if p.peek() == '-' {
		neg = true
		p.i++
	}
	start := p.i
	dot := -1
	for !p.eof() {
		c := p.s[p.i]
		if c >= '0' && c <= '9' {
			p.i++
		} else if c == '.' && dot < 0 {
			if p.i-start > 12 {
				return nil, errSF
			}
			dot = p.i
			p.i++
		} else {
			break
		}
		if dot < 0 && p.i-start > 15 || dot >= 0 && p.i-start > 16 {
			return nil, errSF
		}
	}
	digits := p.s[start:p.i]
	if digits == "" || digits[0] == '.' {
		return nil, errSF
	}
	if dot < 0 {
		n, err := strconv.ParseInt(digits, 10, 64)
		if err != nil {
			return nil, errSF
		}
		if neg {
			n = -n
		}
		return n, nil
	}
	intPart, frac := p.s[start:dot], p.s[dot+1:p.i]
	if frac == "" || len(frac) > 3 {
		return nil, errSF
	}
	frac += strings.Repeat("0", 3-len(frac))
	n, err := strconv.ParseInt(intPart+frac, 10, 64)
	if err != nil {
		return nil, errSF
	}
	if neg {
		n = -n
	}
	return sfDecimal(n), nil
}

func (p *sfParser) str() (any, error) {
	p.i++ // '"'
	var b strings.Builder
	for !p.eof() {
		c := p.s[p.i]
		p.i++
		switch {
		case c == '\\':
			if p.eof() {
				return nil, errSF
			}
			n := p.s[p.i]
			p.i++
			if n != '"' && n != '\\' {
				return nil, errSF
			}
			b.WriteByte(n)
		case c == '"':
			return b.String(), nil
		case c < 0x20 || c > 0x7e:
			return nil, errSF
		default:
			b.WriteByte(c)
		}
	}
	return nil, errSF
}

func (p *sfParser) token() sfToken {
	start := p.i
	p.i++
	for !p.eof() && (isTchar(p.s[p.i]) || p.s[p.i] == ':' || p.s[p.i] == '/') {
		p.i++
	}
	return sfToken(p.s[start:p.i])
}

func (p *sfParser) bytes() (any, error) {
	p.i++ // ':'
	end := strings.IndexByte(p.s[p.i:], ':')
	if end < 0 {
		return nil, errSF
	}
	enc := p.s[p.i : p.i+end]
	for i := 0; i < len(enc); i++ {
		c := enc[i]
		if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '+' || c == '/' || c == '=') {
			return nil, errSF
		}
	}
	p.i += end + 1
	// RFC 9651 lets parsers accept missing padding; strict decoding otherwise.
	enc = strings.TrimRight(enc, "=")
	b, err := base64.RawStdEncoding.Strict().DecodeString(enc)
	if err != nil {
		return nil, errSF
	}
	return b, nil
}

func (p *sfParser) display() (any, error) {
	if p.i+1 >= len(p.s) || p.s[p.i+1] != '"' {
		return nil, errSF
	}
	p.i += 2
	var b []byte
	for !p.eof() {
		c := p.s[p.i]
		p.i++
		switch {
		case c == '%':
			if p.i+2 > len(p.s) {
				return nil, errSF
			}
			h := p.s[p.i : p.i+2]
			if strings.ToLower(h) != h {
				return nil, errSF
			}
			v, err := strconv.ParseUint(h, 16, 8)
			if err != nil {
				return nil, errSF
			}
			b = append(b, byte(v))
			p.i += 2
		case c == '"':
			if !utf8.Valid(b) {
				return nil, errSF
			}
			return sfDisplay(b), nil
		case c < 0x20 || c > 0x7e:
			return nil, errSF
		default:
			b = append(b, c)
		}
	}
	return nil, errSF
}

// isTchar reports whether c is an RFC 9110 tchar.
func isTchar(c byte) bool {
	switch {
	case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

// sfInteger reads an Item field whose value must be a non-negative Integer; ok is
// false when the field is absent or is anything else, which the drafts say to treat as
// absent. Parameters are allowed and ignored.
func sfInteger(values []string) (n int64, present, ok bool) {
	if len(values) == 0 {
		return 0, false, false
	}
	it, err := parseSFItem(strings.Join(values, ","))
	if err != nil {
		return 0, true, false
	}
	n, ok = it.Value.(int64)
	return n, true, ok && n >= 0
}

// sfBoolean reads an Item field whose value must be a Boolean.
func sfBoolean(values []string) (b, present, ok bool) {
	if len(values) == 0 {
		return false, false, false
	}
	it, err := parseSFItem(strings.Join(values, ","))
	if err != nil {
		return false, true, false
	}
	b, ok = it.Value.(bool)
	return b, true, ok
}

// sfBool formats a Boolean.
func sfBool(b bool) string {
	if b {
		return "?1"
	}
	return "?0"
}

// serializeSFItem writes an Item the way RFC 9651 section 4.1 does; the fuzz test uses
// it to check that what the parser returns means what the input said.
func serializeSFItem(it sfItem) string {
	var b strings.Builder
	writeSFBare(&b, it.Value)
	writeSFParams(&b, it.Params)
	return b.String()
}

func serializeSFDictionary(ms []sfMember) string {
	var b strings.Builder
	for i, m := range ms {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(m.Key)
		switch {
		case m.List != nil:
			b.WriteString("=(")
			for j, it := range m.List.Items {
				if j > 0 {
					b.WriteByte(' ')
				}
				b.WriteString(serializeSFItem(it))
			}
			b.WriteByte(')')
			writeSFParams(&b, m.List.Params)
		case m.Item.Value == true:
			writeSFParams(&b, m.Item.Params)
		default:
			b.WriteByte('=')
			b.WriteString(serializeSFItem(m.Item))
		}
	}
	return b.String()
}

func writeSFParams(b *strings.Builder, ps []sfParam) {
	for _, p := range ps {
		b.WriteByte(';')
		b.WriteString(p.Key)
		if p.Value != true {
			b.WriteByte('=')
			writeSFBare(b, p.Value)
		}
	}
}

func writeSFBare(b *strings.Builder, v any) {
	switch v := v.(type) {
	case int64:
		b.WriteString(strconv.FormatInt(v, 10))
	case sfDecimal:
		if v < 0 {
			b.WriteByte('-')
			v = -v
		}
		b.WriteString(strconv.FormatInt(int64(v)/1000, 10))
		b.WriteByte('.')
		frac := strings.TrimRight(strconv.FormatInt(int64(v)%1000+1000, 10)[1:], "0")
		if frac == "" {
			frac = "0"
		}
		b.WriteString(frac)
	case string:
		b.WriteByte('"')
		for i := 0; i < len(v); i++ {
			if v[i] == '"' || v[i] == '\\' {
				b.WriteByte('\\')
			}
			b.WriteByte(v[i])
		}
		b.WriteByte('"')
	case sfToken:
		b.WriteString(string(v))
	case []byte:
		b.WriteByte(':')
		b.WriteString(base64.StdEncoding.EncodeToString(v))
		b.WriteByte(':')
	case bool:
		b.WriteString(sfBool(v))
	case sfDate:
		b.WriteByte('@')
		b.WriteString(strconv.FormatInt(int64(v), 10))
	case sfDisplay:
		b.WriteString(`%"`)
		for _, c := range []byte(v) {
			if c == '%' || c == '"' || c < 0x20 || c > 0x7e {
				b.WriteString("%" + strconv.FormatUint(uint64(c)|0x100, 16)[1:])
			} else {
				b.WriteByte(c)
			}
		}
		b.WriteByte('"')
	}
}
