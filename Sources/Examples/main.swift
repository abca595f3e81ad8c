import Glibc
import LoopDispatch

print("placeholder")
