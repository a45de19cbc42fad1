package upload

import (
	"errors"
	"fmt"
	"path"
	"strings"
)

// KeyTemplate builds object keys from an upload's fields, for servers whose keys follow
// a layout of their own (the design's connectors/{connector_id}/{node_id}.pb). It is
// parsed once, at start, so that a template with an unknown variable stops the server
// instead of failing uploads.
type KeyTemplate struct {
	src   string
	parts []keyPart
}

// keyPart is a literal (name == "") or a variable.
type keyPart struct{ lit, name string }

// KeyVariables are the variables a key template may use.
var KeyVariables = []string{"upload_id", "node_id", "connector_id", "name", "ext", "tenant"}

// ParseKeyTemplate parses src: literal text with variables in braces, e.g.
// "connectors/{connector_id}/{node_id}.pb".
func ParseKeyTemplate(src string) (*KeyTemplate, error) {
	if src == "" {
		return nil, errors.New("server: the key template is empty")
	}
	t := &KeyTemplate{src: src}
	rest := src
	for rest != "" {
		open := strings.IndexAny(rest, "{}")
		if open < 0 {
			t.parts = append(t.parts, keyPart{lit: rest})
			break
		}
		if rest[open] == '}' {
			return nil, fmt.Errorf("server: key template %q: '}' without '{'", src)
		}
		if open > 0 {
			t.parts = append(t.parts, keyPart{lit: rest[:open]})
		}
		end := strings.IndexAny(rest[open+1:], "{}")
		if end < 0 || rest[open+1+end] != '}' {
			return nil, fmt.Errorf("server: key template %q: '{' without '}'", src)
		}
		name := rest[open+1 : open+1+end]
		if !knownVariable(name) {
			return nil, fmt.Errorf("server: key template %q: unknown variable {%s} (use %s)", src, name, "{"+strings.Join(KeyVariables, "}, {")+"}")
		}
		t.parts = append(t.parts, keyPart{name: name})
		rest = rest[open+2+end:]
	}
	return t, nil
}

func knownVariable(name string) bool {
	for _, v := range KeyVariables {
		if v == name {
			return true
		}
	}
	return false
}

// String returns the template as given.
func (t *KeyTemplate) String() string { return t.src }

// Uses reports whether the template uses variable name.
func (t *KeyTemplate) Uses(name string) bool {
	for _, p := range t.parts {
		if p.name == name {
			return true
		}
	}
	return false
}

// KeyFields are the values a key template fills in.
type KeyFields struct {
	UploadID, NodeID, ConnectorID, Name, Tenant string
}

// baseName reduces a client's file name to a safe last path element ("" when none).
func baseName(name string) string {
	base := path.Base(strings.ReplaceAll(name, "\\", "/"))
	if base == "." || base == ".." || base == "/" {
		return ""
	}
	return base
}

// Expand fills in the template: {name} is the file name's last path element, {ext}
// its extension with the dot ("" without one), so "{node_id}{ext}" makes "UUID.pdf".
// The key is then checked like a key a client sends (ValidateKey); a variable left
// empty is named in the error, since that is the usual cause of an invalid key.
func (t *KeyTemplate) Expand(f KeyFields) (string, error) {
	name := baseName(f.Name)
	vals := map[string]string{"upload_id": f.UploadID, "node_id": f.NodeID, "connector_id": f.ConnectorID,
		"name": name, "ext": path.Ext(name), "tenant": f.Tenant}
	var b strings.Builder
	var empty []string
	for _, p := range t.parts {
		if p.name == "" {
			b.WriteString(p.lit)
			continue
		}
		v := vals[p.name]
		if v == "" && p.name != "ext" {
			empty = append(empty, p.name)
		}
		b.WriteString(v)
	}
	key := b.String()
	if err := ValidateKey(key); err != nil {
		msg := fmt.Sprintf("the server's key template %q makes key %s for this upload, which is not a valid key: %v", t.src, Quote(key), err)
		if len(empty) > 0 {
			msg += fmt.Sprintf(" (empty in this request: %s; set it, or send a key)", strings.Join(empty, ", "))
		}
		return "", &InvalidError{Msg: msg}
	}
	return key, nil
}
