"""Host-side entry points: argument checks, dispatch, compile-cache lookup and launch, one module per op."""
