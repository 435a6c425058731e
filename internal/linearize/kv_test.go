package linearize

import (
	"testing"

	"github.com/anishathalye/porcupine"
)

func TestKVModelTellsLinearFromStale(t *testing.T) {
	ok := []porcupine.Operation{
		{ClientId: 0, Input: KV{Put: true, Key: "a", Value: "1"}, Call: 0, Return: 10},
		{ClientId: 1, Input: KV{Key: "a"}, Output: "1", Call: 20, Return: 30},
	}
	if !porcupine.CheckOperations(KVModel, ok) {
		t.Fatal("a get after a completed put that reads it is linearizable")
	}
	stale := []porcupine.Operation{
		{ClientId: 0, Input: KV{Put: true, Key: "a", Value: "1"}, Call: 0, Return: 10},
		{ClientId: 1, Input: KV{Key: "a"}, Output: "", Call: 20, Return: 30},
	}
	if porcupine.CheckOperations(KVModel, stale) {
		t.Fatal("a get after a completed put that misses it is not linearizable")
	}
}

func TestKVModelTellsACompareAndSetThatSawTheCurrentValueFromAStaleOne(t *testing.T) {
	ok := []porcupine.Operation{
		{ClientId: 0, Input: KV{Put: true, Key: "a", Value: "1"}, Call: 0, Return: 10},
		{ClientId: 1, Input: KV{CAS: true, Key: "a", Expect: "1", Value: "2"}, Output: true, Call: 20, Return: 30},
		{ClientId: 2, Input: KV{CAS: true, Key: "a", Expect: "1", Value: "3"}, Output: false, Call: 40, Return: 50},
		{ClientId: 0, Input: KV{Key: "a"}, Output: "2", Call: 60, Return: 70},
	}
	if !porcupine.CheckOperations(KVModel, ok) {
		t.Fatal("a CAS that sets over the current value, then one that fails over the old value, is linearizable")
	}
	stale := []porcupine.Operation{
		{ClientId: 0, Input: KV{Put: true, Key: "a", Value: "1"}, Call: 0, Return: 10},
		{ClientId: 1, Input: KV{CAS: true, Key: "a", Expect: "", Value: "2"}, Output: true, Call: 20, Return: 30},
	}
	if porcupine.CheckOperations(KVModel, stale) {
		t.Fatal("a CAS that succeeds over a value overwritten before it began is not linearizable")
	}
	unknown := []porcupine.Operation{
		{ClientId: 1, Input: KV{CAS: true, Key: "a", Expect: "", Value: "2"}, Output: nil, Call: 20, Return: 1 << 40},
		{ClientId: 0, Input: KV{Key: "a"}, Output: "2", Call: 60, Return: 70},
		{ClientId: 0, Input: KV{Key: "a"}, Output: "2", Call: 80, Return: 90},
	}
	if !porcupine.CheckOperations(KVModel, unknown) {
		t.Fatal("a CAS of unknown outcome may take effect")
	}
}
