// Package fibertest serves fiber apps on real loopback listeners for the
// tests of the fiber adapter, in this module and in its conformance module
// (fiber/test), which may import it because it sits under fiber/.
package fibertest
