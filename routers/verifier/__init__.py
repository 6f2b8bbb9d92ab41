"""The semantic cache's verifier at run time: the guard in the semantic key, the rules,
the token alignment and the learned cross-encoder."""
