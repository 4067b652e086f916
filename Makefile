# Convenience wrappers around setup.sh (which needs nothing but Python and bash).
.PHONY: run test env
run:
	./setup.sh run
test:
	./setup.sh test
env:
	./setup.sh env
