def pytest_addoption(parser):
    parser.addoption("--regen-golden", action="store_true",
                     help="rewrite the golden files from this run instead of checking them")
