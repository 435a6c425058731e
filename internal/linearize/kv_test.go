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
