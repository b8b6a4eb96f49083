package main

import (
	"context"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/bucketry/ratelimit/examples/internal/limits"
)

// The Items service, written out by hand so that the example needs no
// generated code. Its two unary methods take and return a
// google.protobuf.StringValue: Search maps a query to results, Get an item
// id to the item.
const (
	searchMethod = limits.SearchMethod
	getMethod    = "/example.Items/Get"
)

var itemsService = grpc.ServiceDesc{
	ServiceName: "example.Items",
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{
		{MethodName: "Search", Handler: unary(searchMethod, search)},
		{MethodName: "Get", Handler: unary(getMethod, get)},
	},
}

func search(_ context.Context, q *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
	return wrapperspb.String(fmt.Sprintf("results for %q", q.GetValue())), nil
}

func get(_ context.Context, id *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
	return wrapperspb.String("item " + id.GetValue()), nil
}

// unary returns the handler of a unary method, as protoc-gen-go-grpc
// generates it: decode the request, then call fn through the interceptor.
func unary(fullMethod string, fn func(context.Context, *wrapperspb.StringValue) (*wrapperspb.StringValue, error)) grpc.MethodHandler {
	return func(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
		in := new(wrapperspb.StringValue)
		if err := dec(in); err != nil {
			return nil, err
		}
		if interceptor == nil {
			return fn(ctx, in)
		}
		info := &grpc.UnaryServerInfo{Server: srv, FullMethod: fullMethod}
		return interceptor(ctx, in, info, func(ctx context.Context, req any) (any, error) {
			return fn(ctx, req.(*wrapperspb.StringValue))
		})
	}
}
