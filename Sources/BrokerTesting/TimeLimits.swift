package import Testing

extension Trait where Self == TimeLimitTrait {
    /// The one bound for a test or suite that waits on processes, databases or the network: ten minutes, a limit
    /// for something that hangs (a stalled run then names the test) and never a measure of speed — on two shared
    /// cores a fresh PostgreSQL database alone has taken 14 s while every suite made its own.
    package static var hangBound: Self { .timeLimit(.minutes(10)) }
}
