import LoopDispatch

/// `DataSource.post` (and `resume`, `activate`) called on the main thread outside any
/// main-queue item, with the main queue idle: the handler must run later as main-queue work,
/// never inside the call (it used to run inside `post`, skipping the main queue).
func mainPostScenario() {
  let source = DataSource(merge: .add, queue: .main)
  let insideCall = MainConfined(false)
  let ranInsideCall = MainConfined([String]())
  let total = MainConfined<UInt>(0)
  let deliveries = MainConfined(0)
  source.setEventHandler {
    if insideCall.value { ranInsideCall.value.append("delivery \(deliveries.value + 1)") }
    if Queue.current !== Queue.main { ranInsideCall.value.append("not on the main queue") }
    deliveries.value += 1
    total.value += source.data
  }
  insideCall.value = true
  source.activate()
  source.post(2)
  insideCall.value = false
  if !Queue.runMain(until: { total.value == 2 }, deadline: .now + .seconds(10)) {
    fail("the first post was not delivered")
  }
  source.suspend()
  source.post(3)
  insideCall.value = true
  source.resume()
  insideCall.value = false
  if !Queue.runMain(until: { total.value == 5 }, deadline: .now + .seconds(10)) {
    fail("the post made while suspended was not delivered after resume")
  }
  if !ranInsideCall.value.isEmpty {
    fail("the handler ran inside the client's call: \(ranInsideCall.value)")
  }
  source.cancel()
}
