// Package protosource holds chunkup's proto files as descriptors with their comments,
// for gRPC reflection: the descriptors the generated code registers carry no source
// information, so grpcurl's describe (and any client built by reflection) would see the
// API without the comments that document it. `make generate` writes chunkup.binpb
// (buf build); check-generate keeps it current.
package protosource

import (
	_ "embed"
	"fmt"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
)

//go:embed chunkup.binpb
var raw []byte

// Resolver finds chunkup's files in the commented descriptors, and every other file
// (well-known types, health, reflection itself) in the process's registry.
type Resolver struct{ own *protoregistry.Files }

var _ protodesc.Resolver = (*Resolver)(nil)

// New reads the embedded descriptors.
func New() (*Resolver, error) {
	var set descriptorpb.FileDescriptorSet
	if err := proto.Unmarshal(raw, &set); err != nil {
		return nil, fmt.Errorf("protosource: %w", err)
	}
	r := &Resolver{own: new(protoregistry.Files)}
	for _, fdp := range set.File { // buf writes a file after those it imports
		fd, err := protodesc.NewFile(fdp, r)
		if err != nil {
			return nil, fmt.Errorf("protosource: %s: %w", fdp.GetName(), err)
		}
		if err := r.own.RegisterFile(fd); err != nil {
			return nil, fmt.Errorf("protosource: %s: %w", fdp.GetName(), err)
		}
	}
	return r, nil
}

// FindFileByPath implements protodesc.Resolver.
func (r *Resolver) FindFileByPath(path string) (protoreflect.FileDescriptor, error) {
	if fd, err := r.own.FindFileByPath(path); err == nil {
		return fd, nil
	}
	return protoregistry.GlobalFiles.FindFileByPath(path)
}

// FindDescriptorByName implements protodesc.Resolver.
func (r *Resolver) FindDescriptorByName(name protoreflect.FullName) (protoreflect.Descriptor, error) {
	if d, err := r.own.FindDescriptorByName(name); err == nil {
		return d, nil
	}
	return protoregistry.GlobalFiles.FindDescriptorByName(name)
}
